package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/kvroute/kvroute/scoring"
)

func init() {
	register("hash", "print local block hashes and sequence hashes of tokens", runHash)
}

// runHash prints one line per full block: index, local hash, sequence hash (decimal), so a user can compare
// router hashes with an engine's.
func runHash(args []string) int {
	fs := flag.NewFlagSet("hash", flag.ContinueOnError)
	blockSize := fs.Int("block-size", 16, "tokens per KV block (must equal the engine's)")
	tokensArg := fs.String("tokens", "", "comma-separated token ids")
	lora := fs.String("lora-name", "", "LoRA adapter name (changes the block-hash seed)")
	salt := fs.String("cache-salt", "", "cache namespace / salt (changes the block-hash seed)")
	mmArg := fs.String("mm-hash", "", "comma-separated mm_hash values (decimal or 0x hex) appended to every block (legacy scheme)")
	if code, ok := parseFlags(fs, args, false); !ok {
		return code
	}
	if *blockSize <= 0 {
		fmt.Fprintln(os.Stderr, "hash: --block-size must be positive")
		return 2
	}
	tokens, err := parseUint32List(*tokensArg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "hash: --tokens: %v\n", err)
		return 2
	}
	var mm []uint64
	if *mmArg != "" {
		for _, f := range strings.Split(*mmArg, ",") {
			v, err := strconv.ParseUint(strings.TrimSpace(f), 0, 64)
			if err != nil {
				fmt.Fprintf(os.Stderr, "hash: --mm-hash: %v\n", err)
				return 2
			}
			mm = append(mm, v)
		}
	}
	seed := scoring.DeriveSeed(*lora, *salt)
	var blockMM [][]uint64
	if len(mm) > 0 {
		blockMM = make([][]uint64, len(tokens) / *blockSize)
		for i := range blockMM {
			blockMM[i] = mm
		}
	}
	local := scoring.LocalBlockHashes(nil, tokens, *blockSize, seed, blockMM)
	seq := scoring.SequenceHashes(nil, local)
	for i := range local {
		fmt.Printf("%d %d %d\n", i, local[i], seq[i])
	}
	if len(local) == 0 {
		fmt.Fprintf(os.Stderr, "hash: %d tokens make no full block of %d\n", len(tokens), *blockSize)
	}
	return 0
}

func parseUint32List(s string) ([]uint32, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]uint32, 0, len(parts))
	for _, p := range parts {
		v, err := strconv.ParseUint(strings.TrimSpace(p), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("token %q: %w", p, err)
		}
		out = append(out, uint32(v))
	}
	return out, nil
}
