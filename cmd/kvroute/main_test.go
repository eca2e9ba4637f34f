package main

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if testBinary.dir != "" {
		_ = os.RemoveAll(testBinary.dir)
	}
	os.Exit(code)
}
