package transfer

import (
	"fmt"
	"os"
	"strings"
)

// Mode selects how a preprocessed image (mm_kwargs) reaches the worker.
type Mode uint8

const (
	// ModeOff sends nothing: the worker fetches and preprocesses the image itself from its URL.
	ModeOff Mode = iota
	// ModeShm writes one POSIX shared-memory segment per image under /dev/shm (same node only).
	ModeShm
	// ModeNet registers the item with the frontend's transfer agent; the worker pulls it over TCP.
	ModeNet
)

// String is the flag value of the mode.
func (m Mode) String() string {
	switch m {
	case ModeShm:
		return "shm"
	case ModeNet:
		return "net"
	default:
		return "off"
	}
}

// ParseMode reads a --mm-transfer value: "shm", "net" (alias "nixl", Dynamo's name), "off" (aliases
// "none", "disabled", "0"). Case and surrounding space are ignored.
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "shm":
		return ModeShm, nil
	case "net", "nixl", "tcp":
		return ModeNet, nil
	case "off", "none", "disabled", "0", "false":
		return ModeOff, nil
	}
	return ModeOff, fmt.Errorf("%w: mm transfer mode %q (want shm, net or off)", ErrConfig, s)
}

// Environment variables read by ResolveMode.
const (
	EnvMode       = "KVROUTE_MM_TRANSFER"
	EnvDynamoMode = "DYNAMO_MM_TRANSFER"
	EnvDisable    = "DYNAMO_DISABLE_NIXL_MM"
)

// ResolveMode decides the mode once at startup. Precedence: DYNAMO_DISABLE_NIXL_MM=1 (off, whatever
// else is set, as in Dynamo), then the --mm-transfer flag when given (flag != ""), then
// KVROUTE_MM_TRANSFER, then DYNAMO_MM_TRANSFER, else off. kvroute defaults to off where Dynamo defaults to
// shm: a router in front of a remote fleet gains nothing from a segment no worker can open.
// getenv is os.Getenv in production (nil means os.Getenv).
func ResolveMode(flag string, getenv func(string) string) (Mode, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if v := strings.TrimSpace(getenv(EnvDisable)); v == "1" || strings.EqualFold(v, "true") {
		return ModeOff, nil
	}
	for _, v := range []string{flag, getenv(EnvMode), getenv(EnvDynamoMode)} {
		if strings.TrimSpace(v) != "" {
			return ParseMode(v)
		}
	}
	return ModeOff, nil
}
