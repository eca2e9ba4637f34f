package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

// logFlags are the logging flags of frontend, serve and router. Dynamo's DYN_LOG (a level, optionally
// followed by per-target directives) and DYN_LOGGING_JSONL set their defaults.
type logFlags struct {
	format *string
	level  *string
	access *bool
}

func addLogFlags(fs *flag.FlagSet) (*logFlags, error) {
	l := &logFlags{}
	format := envOr("KVROUTE_LOG_FORMAT", "text")
	jsonl, err := envBool("DYN_LOGGING_JSONL")
	if err != nil {
		return nil, err
	}
	if jsonl {
		format = "json"
	}
	access, err := envBool("KVROUTE_ACCESS_LOG")
	if err != nil {
		return nil, err
	}
	l.format = fs.String("log-format", format, "text or json (one JSON object per line) [$KVROUTE_LOG_FORMAT; DYN_LOGGING_JSONL=1 means json]")
	l.level = fs.String("log-level", envOr("DYN_LOG", "info"), "debug, info, warn or error; Dynamo's DYN_LOG form \"info,target=debug\" takes its first bare level [$DYN_LOG]")
	l.access = fs.Bool("access-log", access, "one log line per OpenAI request: id, worker, overlap, status, TTFT, duration [$KVROUTE_ACCESS_LOG]")
	return l, nil
}

// parseLevel reads a slog level from a DYN_LOG-style value: "debug", "INFO", "info,dynamo_llm=debug",
// "trace" (debug). Per-target directives have no equivalent here and are skipped.
func parseLevel(s string) (slog.Level, error) {
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" || strings.Contains(part, "=") {
			continue
		}
		switch strings.ToLower(part) {
		case "trace", "debug":
			return slog.LevelDebug, nil
		case "info":
			return slog.LevelInfo, nil
		case "warn", "warning":
			return slog.LevelWarn, nil
		case "error":
			return slog.LevelError, nil
		}
		return 0, oneOf("log-level", part, []string{"debug", "info", "warn", "error"})
	}
	return slog.LevelInfo, nil
}

// logger builds the process logger writing to w.
func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	lvl, err := parseLevel(*l.level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(*l.format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json", "jsonl":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, oneOf("log-format", *l.format, []string{"text", "json"})
}

// fatal reports a startup error through log when there is one (so a JSON log stays JSON), else on stderr.
func fatal(log *slog.Logger, cmd string, err error) {
	if log != nil {
		log.Error(cmd+" failed", "err", err.Error())
		return
	}
	fmt.Fprintf(os.Stderr, "kvroute %s: %v\n", cmd, err)
}
