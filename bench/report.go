package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Machine describes where a report was produced; figures mean little without it.
type Machine struct {
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	CPU        string `json:"cpu"`
	NumCPU     int    `json:"num_cpu"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	GoVersion  string `json:"go_version"`
	LoadAvg    string `json:"load_avg,omitempty"`
}

// ThisMachine reads the machine description (CPU model and load average from /proc when present).
func ThisMachine() Machine {
	m := Machine{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, NumCPU: runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}

// Table is one table of a report.
type Table struct {
	Title   string     `json:"title"`
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

// Plot is one SVG file of a report.
type Plot struct {
	File  string `json:"file"`
	Title string `json:"title"`
	svg   string
}

// Report is what every bench writes into --out: report.json (the whole struct, Data included),
// report.md (tables and notes) and one SVG per plot.
type Report struct {
	Bench    string    `json:"bench"`
	Command  string    `json:"command"`
	Started  time.Time `json:"started"`
	Duration float64   `json:"duration_s"`
	Machine  Machine   `json:"machine"`
	Tables   []Table   `json:"tables"`
	Plots    []Plot    `json:"plots"`
	Notes    []string  `json:"notes,omitempty"`
	// Data is the bench's own result structure (raw numbers for scripts).
	Data any `json:"data"`
}

// NewReport starts a report for a bench run.
func NewReport(bench string, args []string) *Report {
	return &Report{Bench: bench, Command: "kvroute bench " + bench + " " + strings.Join(args, " "),
		Started: time.Now().UTC(), Machine: ThisMachine()}
}

// AddPlot adds an SVG plot under file (a base name ending in .svg).
func (r *Report) AddPlot(file, title, svg string) {
	r.Plots = append(r.Plots, Plot{File: file, Title: title, svg: svg})
}

// Markdown renders the report.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# kvroute bench %s\n\n", r.Bench)
	fmt.Fprintf(&b, "Command: `%s`\n\n", strings.TrimSpace(r.Command))
	m := r.Machine
	fmt.Fprintf(&b, "Machine: %s, %d CPUs (GOMAXPROCS %d), %s/%s, %s", m.CPU, m.NumCPU, m.GOMAXPROCS, m.GOOS, m.GOARCH, m.GoVersion)
	if m.LoadAvg != "" {
		fmt.Fprintf(&b, ", load average %s at start", m.LoadAvg)
	}
	fmt.Fprintf(&b, ". Started %s, ran %.1f s.\n\n", r.Started.Format(time.RFC3339), r.Duration)
	for _, t := range r.Tables {
		b.WriteString(MarkdownTable(t))
		b.WriteString("\n")
	}
	for _, p := range r.Plots {
		fmt.Fprintf(&b, "![%s](%s)\n\n", p.Title, p.File)
	}
	if len(r.Notes) > 0 {
		b.WriteString("Notes:\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

// MarkdownTable renders one table.
func MarkdownTable(t Table) string {
	var b strings.Builder
	if t.Title != "" {
		fmt.Fprintf(&b, "## %s\n\n", t.Title)
	}
	b.WriteString("| " + strings.Join(t.Columns, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat("---|", len(t.Columns)) + "\n")
	for _, row := range t.Rows {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	return b.String()
}

// Write stores report.json, report.md and the plots in dir (created if needed).
func (r *Report) Write(dir string) error {
	if r.Duration == 0 {
		r.Duration = time.Since(r.Started).Seconds()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(r.Markdown()), 0o644); err != nil {
		return err
	}
	for _, p := range r.Plots {
		if err := os.WriteFile(filepath.Join(dir, p.File), []byte(p.svg), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// F formats a float for a table cell with d decimals.
func F(v float64, d int) string { return fmt.Sprintf("%.*f", d, v) }

// Pct formats a rate in [0, 1] as a percentage.
func Pct(v float64) string { return fmt.Sprintf("%.1f %%", 100*v) }
