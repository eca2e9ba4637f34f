package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	json "github.com/goccy/go-json"

	"github.com/kvroute/kvroute/model"
)

func init() {
	register("tokenize", "print the token ids of a prompt (or, with --chat, of OpenAI messages) on stdin", runTokenize)
}

// defaultModelPath is the fixture model kvroute serve uses by default.
const defaultModelPath = "testdata/models/Qwen3-VL-2B-Instruct"

// runTokenize reads stdin and prints {"tokens":[...],"count":N}: the ids the engine computes for the same input, so
// a user can check the router's tokenization against an engine's.
func runTokenize(args []string) int {
	fs := flag.NewFlagSet("tokenize", flag.ContinueOnError)
	modelPath := fs.String("model-path", defaultModelPath, "HF model directory or hub name (resolved in the HF cache)")
	chat := fs.Bool("chat", false, "stdin is an OpenAI messages JSON array (or a request object with messages and tools); render it with the chat template")
	genPrompt := fs.Bool("add-generation-prompt", true, "with --chat: append the assistant header")
	special := fs.Bool("add-special-tokens", false, "without --chat: add the post-processor's tokens (BOS for Llama-2)")
	if code, ok := parseFlags(fs, args, false); !ok {
		return code
	}
	dir, err := model.Resolve(*modelPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "tokenize: %v\n", err)
		return 1
	}
	m, err := model.Load(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "tokenize: %v\n", err)
		return 1
	}
	in, err := io.ReadAll(bufio.NewReader(os.Stdin))
	if err != nil {
		fmt.Fprintf(os.Stderr, "tokenize: stdin: %v\n", err)
		return 1
	}
	var ids []uint32
	switch {
	case *chat:
		msgs, opts, err := parseChatInput(in)
		if err != nil {
			fmt.Fprintf(os.Stderr, "tokenize: %v\n", err)
			return 2
		}
		opts.AddGenerationPrompt = *genPrompt
		if ids, err = m.EncodeChat(msgs, opts); err != nil {
			fmt.Fprintf(os.Stderr, "tokenize: %v\n", err)
			return 1
		}
	case *special:
		ids = m.Tokenizer.EncodeSpecial(string(in))
	default:
		ids = m.Tokenizer.Encode(string(in))
	}
	out := make([]byte, 0, 16+len(ids)*7)
	out = append(out, `{"tokens":[`...)
	for i, id := range ids {
		if i > 0 {
			out = append(out, ',')
		}
		out = strconv.AppendUint(out, uint64(id), 10)
	}
	out = append(out, `],"count":`...)
	out = strconv.AppendInt(out, int64(len(ids)), 10)
	out = append(out, "}\n"...)
	if _, err := os.Stdout.Write(out); err != nil {
		return 1
	}
	return 0
}

// parseChatInput accepts a messages array, or an object with "messages" and optional "tools" (a chat request).
func parseChatInput(in []byte) ([]model.Message, model.ChatOptions, error) {
	in = bytes.TrimSpace(in)
	if len(in) > 0 && in[0] == '[' {
		msgs, err := model.ParseMessages(in)
		return msgs, model.ChatOptions{}, err
	}
	var req struct {
		Messages json.RawMessage   `json:"messages"`
		Tools    []json.RawMessage `json:"tools"`
		Kwargs   map[string]any    `json:"chat_template_kwargs"`
	}
	if err := json.Unmarshal(in, &req); err != nil {
		return nil, model.ChatOptions{}, fmt.Errorf("stdin: want a messages array or a request object: %w", err)
	}
	msgs, err := model.ParseMessages(req.Messages)
	return msgs, model.ChatOptions{Tools: req.Tools, Kwargs: req.Kwargs}, err
}
