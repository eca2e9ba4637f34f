package oaiwire

import "testing"

// skipStringByteByByte is the plain definition SkipString must agree with: a backslash escapes the next
// byte, the first unescaped quote ends the string.
func skipStringByteByByte(b []byte, i int) (int, error) {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1, nil
		}
	}
	return 0, ErrSyntax
}

func FuzzSkipString(f *testing.F) {
	for _, s := range []string{`"abc"`, `"a\"b"`, `"a\\"b`, `"a\\\"b"`, `"\`, `"`, `"x\\\\"`, `"é\u0041"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != '"' {
			return
		}
		got, gerr := SkipString(b, 0)
		want, werr := skipStringByteByByte(b, 0)
		if got != want || (gerr == nil) != (werr == nil) {
			t.Fatalf("%q: SkipString %d %v, byte by byte %d %v", b, got, gerr, want, werr)
		}
	})
}
