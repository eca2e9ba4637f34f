package model

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

// randomConversation builds a conversation of corpus snippets, with images now and then. Turns are long enough
// to be cached segments most of the time.
func randomConversation(rng *rand.Rand, corpus []string, turns int) []Message {
	text := func() string {
		var sb strings.Builder
		for n := 1 + rng.IntN(4); n > 0; n-- {
			sb.WriteString(corpus[rng.IntN(len(corpus))])
			sb.WriteByte(' ')
		}
		return sb.String()
	}
	msgs := []Message{}
	if rng.IntN(2) == 0 {
		msgs = append(msgs, Message{Role: "system", Content: TextContent(text())})
	}
	for i := 0; i < turns; i++ {
		if rng.IntN(5) == 0 {
			msgs = append(msgs, Message{Role: "user", Content: PartsContent(
				ContentPart{Type: "text", Text: text()},
				ContentPart{Type: "image_url", ImageURL: &MediaURL{URL: "https://example.com/i.png"}},
			)})
		} else {
			msgs = append(msgs, Message{Role: "user", Content: TextContent(text())})
		}
		msgs = append(msgs, Message{Role: "assistant", Content: TextContent(text())})
	}
	return msgs
}

// TestSegmentCacheEqualsFull: on 1,000 random conversations, each re-sent turn by turn (so earlier turns are cache
// hits), the cached tokenization equals a full one. The cache is small, so eviction happens too.
func TestSegmentCacheEqualsFull(t *testing.T) {
	m := fixture(t)
	corpus := readCorpus(t)
	rng := rand.New(rand.NewPCG(1, 2))
	cache := NewSegmentCache(256 << 10)
	checked := 0
	for conv := 0; conv < 1000; conv++ {
		msgs := randomConversation(rng, corpus, 1+rng.IntN(3))
		for k := 1; k <= len(msgs); k++ {
			if msgs[k-1].Role != "assistant" && k != len(msgs) {
				continue
			}
			text, err := m.RenderChat(msgs[:k], ChatOptions{AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			got := m.Tokenizer.EncodeCached(text, cache)
			want := m.Tokenizer.Encode(text)
			if !slices.Equal(got, want) {
				t.Fatalf("conversation %d turn %d: cached tokenization differs\n got %v\nwant %v", conv, k, got, want)
			}
			checked++
		}
	}
	st := cache.Stats()
	if st.Hits == 0 || st.Bytes > 256<<10 {
		t.Fatalf("stats %+v after %d prompts", st, checked)
	}
	t.Logf("%d prompts, %+v", checked, st)
}

func TestSegmentCacheBound(t *testing.T) {
	c := NewSegmentCache(1000)
	for i := 0; i < 100; i++ {
		s := strings.Repeat(string(rune('a'+i%26)), 50+i)
		c.put(s, []uint32{1, 2, 3})
		if st := c.Stats(); st.Bytes > 1000 {
			t.Fatalf("size %d over bound", st.Bytes)
		}
	}
	c.put(strings.Repeat("x", 5000), nil) // larger than the whole cache: not kept
	if _, ok := c.get(strings.Repeat("x", 5000)); ok {
		t.Fatal("oversized entry kept")
	}
}

// TestConcurrentEncode runs Encode and EncodeChat from several goroutines over shared caches (the race detector
// checks the word cache's atomics and the segment cache's lock) and compares with sequential results.
func TestConcurrentEncode(t *testing.T) {
	m := fixture(t)
	corpus := readCorpus(t)[:400]
	want := make([][]uint32, len(corpus))
	for i, s := range corpus {
		want[i] = m.Tokenizer.Encode(s)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	convs := make([][]Message, 8)
	wantChat := make([][]uint32, len(convs))
	for i := range convs {
		convs[i] = randomConversation(rng, corpus, 2)
		text, err := m.RenderChat(convs[i], ChatOptions{AddGenerationPrompt: true})
		if err != nil {
			t.Fatal(err)
		}
		wantChat[i] = m.Tokenizer.Encode(text)
	}
	errs := make(chan string, 16)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range corpus {
				k := (i*7 + g*13) % len(corpus)
				if got := m.Tokenizer.Encode(corpus[k]); !slices.Equal(got, want[k]) {
					errs <- fmt.Sprintf("goroutine %d: line %d differs", g, k)
					return
				}
				if i%50 == 0 {
					c := (i/50 + g) % len(convs)
					got, err := m.EncodeChat(convs[c], ChatOptions{AddGenerationPrompt: true})
					if err != nil || !slices.Equal(got, wantChat[c]) {
						errs <- fmt.Sprintf("goroutine %d: conversation %d differs (%v)", g, c, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
