package main

import (
	"os"
	"sync"
	"testing"

	"github.com/kvroute/kvroute/model"
)

func TestMain(m *testing.M) {
	// Each fixture model is loaded once for the binary (1.8 s under -race, and dozens of tests start a
	// frontend): a loaded model is read-only and safe for concurrent use, as every request shares it.
	var mu sync.Mutex
	loaded := map[string]*model.Model{}
	loadModel = func(dir string) (*model.Model, error) {
		mu.Lock()
		defer mu.Unlock()
		if m, ok := loaded[dir]; ok {
			return m, nil
		}
		m, err := model.Load(dir)
		if err == nil {
			loaded[dir] = m
		}
		return m, err
	}
	code := m.Run()
	if testBinary.dir != "" {
		_ = os.RemoveAll(testBinary.dir)
	}
	os.Exit(code)
}
