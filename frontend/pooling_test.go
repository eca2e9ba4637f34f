package frontend

import (
	"errors"
	"testing"
)

// Any pooling body decodes or gives a 400/404/413 class, never a panic.
func FuzzDecodePooling(f *testing.F) {
	f.Add(uint8(0), []byte(`{"model":"m","input":["a",[1,2]]}`))
	f.Add(uint8(1), []byte(`{"model":"m","text_1":"a","text_2":["b"]}`))
	f.Add(uint8(2), []byte(`{"model":"m","query":"q","documents":[{"text":"d"}]}`))
	f.Fuzz(func(t *testing.T, kind uint8, b []byte) {
		ep := epEmbeddings + endpoint(kind%3)
		in, err := decodePooling(ep, b, []string{"m"})
		if err != nil {
			if !errors.Is(err, ErrBadRequest) && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("unclassed error %v", err)
			}
			return
		}
		if in.model != "m" || len(in.texts)+len(in.tokens) == 0 && ep != epEmbeddings {
			t.Fatalf("decoded %+v", in)
		}
	})
}
