package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sort"
)

// command is one subcommand: run parses its own flags from args and returns the process exit code.
type command struct {
	summary string
	run     func(args []string) int
}

var commands = map[string]command{}

func register(name, summary string, run func(args []string) int) {
	commands[name] = command{summary: summary, run: run}
}

func commandNames() []string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: kvroute <command> [flags]\n\ncommands:")
	for _, n := range commandNames() {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "  help       `kvroute help <command>`: the command's flags, grouped by topic")
	fmt.Fprintln(w, "  version    the module version and the commit it was built from")
}

// buildVersion and buildCommit may be set at link time (-ldflags "-X main.buildVersion=... -X
// main.buildCommit=...", as make build and the container build do) where Go's VCS stamping is off.
var buildVersion, buildCommit string

// version is the binary's module version and VCS revision, from the build info Go embeds (or the
// link-time values).
func version() string {
	v, rev, dirty := "(devel)", buildCommit, false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value[:min(12, len(s.Value))]
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if buildVersion != "" {
		v = buildVersion
	}
	s := "kvroute " + v
	if rev != "" {
		s += " commit " + rev
		if dirty {
			s += " (modified)"
		}
	}
	return s
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "help":
		if len(args) == 1 {
			usage(stdout)
			return 0
		}
		if c, ok := commands[args[1]]; ok {
			return c.run(append(args[2:], "--help"))
		}
		return unknownCommand(args[1], stderr)
	case "version", "-version", "--version", "-v":
		fmt.Fprintln(stdout, version())
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		return unknownCommand(args[0], stderr)
	}
	return cmd.run(args[1:])
}

func unknownCommand(name string, stderr io.Writer) int {
	s := fmt.Sprintf("kvroute: unknown command %q", name)
	if sug := suggest(name, append(commandNames(), "help", "version")); sug != "" {
		s += fmt.Sprintf(" (did you mean %s?)", sug)
	}
	fmt.Fprintln(stderr, s+"; see `kvroute --help`")
	return 2
}
