package model

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	json "github.com/goccy/go-json"
	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
)

// ErrTemplate is the class of chat-template failures: a template that does not parse, or one that raises
// (raise_exception) or fails while rendering given messages.
var ErrTemplate = errors.New("model: chat template")

// ChatTemplate is a parsed HF chat template (Jinja), rendered with the conventions of transformers and vLLM:
// trim_blocks and lstrip_blocks, a Python-compatible tojson, raise_exception, strftime_now, and the special-token
// strings (bos_token, eos_token, ...) as variables. Safe for concurrent use.
type ChatTemplate struct {
	Source string
	tmpl   *exec.Template
	vars   map[string]any // bos_token, eos_token, ... from tokenizer_config.json
	native nativeRenderer // non-nil for a known template source (template_native.go)
}

// ChatOptions are the per-request inputs of a chat template besides the messages.
type ChatOptions struct {
	// AddGenerationPrompt appends the assistant header (true for chat completions).
	AddGenerationPrompt bool
	// Tools are the OpenAI tool definitions as raw JSON objects; key order is kept, as Python's json.dumps would.
	Tools []json.RawMessage
	// Kwargs are extra template variables (chat_template_kwargs: enable_thinking, add_vision_id, ...).
	Kwargs map[string]any
	// ContinueFinalMessage leaves the last message open so the model continues it (prefill of a partial
	// assistant reply): the rendered prompt is cut right after that message's text, dropping the
	// template's end-of-turn tokens. It is not combined with AddGenerationPrompt.
	ContinueFinalMessage bool
}

// NewChatTemplate parses a template. vars are the special-token variables (see TokenizerConfig.TemplateVars).
func NewChatTemplate(source string, vars map[string]any) (*ChatTemplate, error) {
	cfg := config.New()
	cfg.TrimBlocks = true
	cfg.LeftStripBlocks = true
	cfg.KeepTrailingNewline = false
	loader, err := loaders.NewFileSystemLoader("")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTemplate, err)
	}
	root, err := loaders.NewShiftedLoader("chat_template", strings.NewReader(source), loader)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTemplate, err)
	}
	tmpl, err := exec.NewTemplate("chat_template", cfg, root, templateEnvironment())
	if err != nil {
		return nil, fmt.Errorf("%w: parse: %v", ErrTemplate, err)
	}
	return &ChatTemplate{Source: source, tmpl: tmpl, vars: vars, native: nativeFor(source)}, nil
}

func templateEnvironment() *exec.Environment {
	filters := exec.NewFilterSet(map[string]exec.FilterFunction{})
	filters.Update(builtins.Filters)
	_ = filters.Replace("tojson", filterPyJSON)
	_ = filters.Replace("trim", filterPyTrim)
	ctx := exec.EmptyContext().Update(builtins.GlobalFunctions).Update(builtins.GlobalVariables)
	ctx.Set("raise_exception", func(msg string) (string, error) {
		return "", fmt.Errorf("%w: raise_exception: %s", ErrTemplate, msg)
	})
	ctx.Set("strftime_now", func(format string) string { return strftime(time.Now(), format) })
	return &exec.Environment{
		Context:           ctx,
		Filters:           filters,
		Tests:             builtins.Tests,
		ControlStructures: builtins.ControlStructures,
		Methods:           pyMethods(),
	}
}

// pyMethods are gonja's methods with Python's strip family: gonja's lstrip/rstrip without an argument strip only
// spaces and its strip uses Go's TrimSpace; Python strips every str.isspace character.
func pyMethods() exec.Methods {
	m := builtins.Methods
	str := map[string]exec.Method[string]{}
	for _, name := range []string{"capitalize", "capwords", "casefold", "center", "count", "encode", "endswith",
		"expandtabs", "find", "format", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "islower",
		"isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "partition",
		"removeprefix", "removesuffix", "replace", "rfind", "rjust", "rpartition", "rsplit", "split",
		"splitlines", "startswith", "swapcase", "title", "upper", "zfill"} {
		if f, ok := m.Str.Get(name); ok {
			str[name] = f
		}
	}
	strip := func(left, right bool) exec.Method[string] {
		return func(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
			if len(args.Args) > 1 || len(args.KwArgs) > 0 {
				return nil, exec.ErrInvalidCall(errors.New("strip takes at most one argument"))
			}
			if len(args.Args) == 0 || args.Args[0].IsNil() {
				return pyStrip(self, left, right, nil), nil
			}
			return pyStrip(self, left, right, []rune(args.Args[0].String())), nil
		}
	}
	str["strip"], str["lstrip"], str["rstrip"] = strip(true, true), strip(true, false), strip(false, true)
	m.Str = exec.NewMethodSet(str)
	return m
}

// pyIsSpace is Python's str.isspace for one character: Go's unicode.IsSpace plus the separators U+001C..U+001F.
func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) }

// pyStrip is Python's str.strip / lstrip / rstrip: chars nil means white space.
func pyStrip(s string, left, right bool, chars []rune) string {
	in := func(r rune) bool {
		if chars == nil {
			return pyIsSpace(r)
		}
		return slices.Contains(chars, r)
	}
	if left {
		s = strings.TrimLeftFunc(s, in)
	}
	if right {
		s = strings.TrimRightFunc(s, in)
	}
	return s
}

// filterPyTrim is Jinja's trim: value.strip(chars).
func filterPyTrim(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	var chars []rune
	if v, ok := params.KwArgs["chars"]; ok && !v.IsNil() {
		chars = []rune(v.String())
	} else if len(params.Args) > 0 && !params.Args[0].IsNil() {
		chars = []rune(params.Args[0].String())
	}
	return exec.AsValue(pyStrip(in.String(), true, true, chars))
}

// Render renders messages into the prompt text the engine will tokenize.
func (ct *ChatTemplate) Render(msgs []Message, opts ChatOptions) (string, error) {
	var buf strings.Builder // String() does not copy, unlike bytes.Buffer: prompts run to megabytes
	buf.Grow(renderSize(msgs))
	if err := ct.execute(&buf, msgs, opts); err != nil {
		return "", err
	}
	out := buf.String()
	if opts.ContinueFinalMessage {
		n, err := continueCut(out, msgs)
		if err != nil {
			return "", err
		}
		out = out[:n]
	}
	return out, nil
}

// continueCut returns where a rendered prompt ends for continue_final_message, as Hugging Face's
// apply_chat_template cuts it: after the last occurrence of the final message's text (its last text part
// for list content), keeping the text's leading part as rendered and its trailing whitespace only when
// the template kept it.
func continueCut(rendered string, msgs []Message) (int, error) {
	if len(msgs) == 0 {
		return 0, fmt.Errorf("%w: continue_final_message needs a final message", ErrTemplate)
	}
	c := &msgs[len(msgs)-1].Content
	final, found := c.Text, !c.IsParts
	for i := len(c.Parts) - 1; i >= 0 && c.IsParts; i-- {
		if c.Parts[i].Type == "text" {
			final, found = c.Parts[i].Text, true
			break
		}
	}
	if !found {
		return 0, fmt.Errorf("%w: continue_final_message: the final message has no text to continue", ErrTemplate)
	}
	return ContinueCut(rendered, final)
}

// ContinueCut returns where a prompt rendered without a generation prompt ends for continue_final_message,
// given the final message's text (its last text part for list content): after the last occurrence of the
// text, as Hugging Face's apply_chat_template cuts it.
func ContinueCut(rendered, final string) (int, error) {
	stripped := pyStrip(final, true, true, nil)
	at := strings.LastIndex(rendered, stripped)
	if at < 0 {
		return 0, fmt.Errorf("%w: continue_final_message: the chat template does not render the final message's text", ErrTemplate)
	}
	lead := pyStrip(final, true, false, nil)
	if end := min(len(rendered), at+len(lead)); rendered[at:end] == final {
		return end, nil // the template kept the text as given, trailing whitespace included
	}
	return at + len(stripped), nil // the template trimmed it
}

// renderSize estimates the rendered length: the contents plus room for the template's own text.
func renderSize(msgs []Message) int {
	size := 4096
	for i := range msgs {
		size += len(msgs[i].Content.Text)
		for _, p := range msgs[i].Content.Parts {
			size += len(p.Text)
		}
	}
	return size + size/8
}

// renderBufs recycles render buffers for callers that only need the prompt text transiently (EncodeChat): a
// 100k-token prompt is ~400 KB, and fresh memory of that size per request costs more than the copy into it.
var renderBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledRender is the largest buffer kept for reuse.
const maxPooledRender = 8 << 20

func (ct *ChatTemplate) execute(w stringWriter, msgs []Message, opts ChatOptions) error {
	if ct.native != nil && nativeUsable(msgs, opts) {
		if err := ct.native(w, msgs, opts); err != errNotNative {
			return err
		}
	}
	data := make(map[string]any, len(ct.vars)+len(opts.Kwargs)+3)
	for k, v := range ct.vars {
		data[k] = v
	}
	for k, v := range opts.Kwargs {
		data[k] = v
	}
	tm := make([]any, len(msgs))
	for i := range msgs {
		tm[i] = templateMessage(&msgs[i])
	}
	data["messages"] = tm
	data["add_generation_prompt"] = opts.AddGenerationPrompt
	if len(opts.Tools) > 0 {
		tools := make([]any, len(opts.Tools))
		for i, raw := range opts.Tools {
			v, err := orderedJSON(raw)
			if err != nil {
				return fmt.Errorf("%w: tools[%d]: %v", ErrTemplate, i, err)
			}
			tools[i] = v
		}
		data["tools"] = tools
	} else {
		data["tools"] = nil
	}
	if err := ct.tmpl.Execute(w, exec.NewContext(data)); err != nil {
		return fmt.Errorf("%w: render: %v", ErrTemplate, err)
	}
	return nil
}

// templateMessage is the message as vLLM hands it to a template: image_url / video_url parts reduced to
// {"type": "image"} / {"type": "video"} (the template emits placeholders, never URLs), tool-call arguments parsed
// from their JSON string into an object. Messages are plain maps (attribute lookups are the template's hot path);
// only tool-call arguments, which templates serialize, keep their key order.
func templateMessage(m *Message) map[string]any {
	d := make(map[string]any, 4)
	d["role"] = m.Role
	switch {
	case m.Content.IsParts:
		parts := make([]any, 0, len(m.Content.Parts))
		for _, p := range m.Content.Parts {
			switch p.Type {
			case "image_url", "image", "input_image", "image_pil", "image_embeds":
				parts = append(parts, map[string]any{"type": "image"})
			case "video_url", "video":
				parts = append(parts, map[string]any{"type": "video"})
			default:
				parts = append(parts, map[string]any{"type": p.Type, "text": p.Text})
			}
		}
		d["content"] = parts
	case m.Content.Null:
		d["content"] = nil
	default:
		d["content"] = m.Content.Text
	}
	if m.Name != "" {
		d["name"] = m.Name
	}
	if m.ReasoningContent != "" {
		d["reasoning_content"] = m.ReasoningContent
	}
	if len(m.ToolCalls) > 0 {
		calls := make([]any, len(m.ToolCalls))
		for i, tc := range m.ToolCalls {
			var args any = tc.Function.Arguments
			if v, err := orderedJSON([]byte(tc.Function.Arguments)); err == nil {
				if _, isObj := v.(exec.Dict); isObj {
					args = v
				}
			}
			typ := tc.Type
			if typ == "" {
				typ = "function"
			}
			call := map[string]any{"type": typ, "function": map[string]any{"name": tc.Function.Name, "arguments": args}}
			if tc.ID != "" {
				call["id"] = tc.ID
			}
			calls[i] = call
		}
		d["tool_calls"] = calls
	}
	if m.ToolCallID != "" {
		d["tool_call_id"] = m.ToolCallID
	}
	return d
}

// orderedJSON decodes JSON into template values that keep object key order (exec.Dict), with numbers as int64
// when integral and float64 otherwise.
func orderedJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeOrdered(dec)
	if err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after JSON value")
	}
	return v, nil
}

func decodeOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := exec.Dict{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeOrdered(dec)
				if err != nil {
					return nil, err
				}
				d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue(k), Value: exec.AsValue(v)})
			}
			_, err := dec.Token()
			return d, err
		case '[':
			list := []any{}
			for dec.More() {
				v, err := decodeOrdered(dec)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			_, err := dec.Token()
			return list, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i, nil
		}
		if !strings.ContainsAny(string(t), ".eE") {
			return t, nil // an integer beyond int64: Python keeps it exact, so keep the literal
		}
		f, err := t.Float64()
		return f, err
	default:
		return t, nil // string, bool, nil
	}
}

// filterPyJSON is tojson as transformers defines it: json.dumps(x, ensure_ascii=False, indent=indent,
// separators=separators, sort_keys=sort_keys), so ", " and ": " separators, insertion order, non-ASCII unescaped.
func filterPyJSON(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	indent := -1
	sortKeys := false
	if v, ok := params.KwArgs["indent"]; ok && !v.IsNil() {
		indent = v.Integer()
	}
	if v, ok := params.KwArgs["sort_keys"]; ok {
		sortKeys = v.Bool()
	}
	if len(params.Args) > 0 && !params.Args[0].IsNil() {
		indent = params.Args[0].Integer()
	}
	var sb strings.Builder
	if err := writePyJSON(&sb, in.Interface(), indent, 0, sortKeys); err != nil {
		return exec.AsValue(fmt.Errorf("tojson: %w", err))
	}
	return exec.AsSafeValue(sb.String())
}

func writePyJSON(sb *strings.Builder, v any, indent, depth int, sortKeys bool) error {
	newline := func(d int) {
		if indent >= 0 {
			sb.WriteByte('\n')
			sb.WriteString(strings.Repeat(" ", indent*d))
		}
	}
	itemSep := ", "
	if indent >= 0 {
		itemSep = ","
	}
	writePairs := func(keys []string, vals []any) error {
		if len(keys) == 0 {
			sb.WriteString("{}")
			return nil
		}
		idx := make([]int, len(keys))
		for i := range idx {
			idx[i] = i
		}
		if sortKeys {
			sort.SliceStable(idx, func(a, b int) bool { return keys[idx[a]] < keys[idx[b]] })
		}
		sb.WriteByte('{')
		for n, i := range idx {
			if n > 0 {
				sb.WriteString(itemSep)
			}
			newline(depth + 1)
			writePyString(sb, keys[i])
			sb.WriteString(": ")
			if err := writePyJSON(sb, vals[i], indent, depth+1, sortKeys); err != nil {
				return err
			}
		}
		newline(depth)
		sb.WriteByte('}')
		return nil
	}
	switch x := v.(type) {
	case nil:
		sb.WriteString("null")
	case *exec.Value:
		return writePyJSON(sb, x.Interface(), indent, depth, sortKeys)
	case exec.Dict:
		keys := make([]string, len(x.Pairs))
		vals := make([]any, len(x.Pairs))
		for i, p := range x.Pairs {
			keys[i], vals[i] = p.Key.String(), p.Value.Interface()
		}
		return writePairs(keys, vals)
	case *exec.Dict:
		return writePyJSON(sb, *x, indent, depth, sortKeys)
	case string:
		writePyString(sb, x)
	case bool:
		if x {
			sb.WriteString("true")
		} else {
			sb.WriteString("false")
		}
	case int:
		sb.WriteString(strconv.Itoa(x))
	case int64:
		sb.WriteString(strconv.FormatInt(x, 10))
	case float64:
		sb.WriteString(pyFloat(x))
	case json.Number:
		sb.WriteString(string(x))
	case []any:
		if len(x) == 0 {
			sb.WriteString("[]")
			return nil
		}
		sb.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				sb.WriteString(itemSep)
			}
			newline(depth + 1)
			if err := writePyJSON(sb, e, indent, depth+1, sortKeys); err != nil {
				return err
			}
		}
		newline(depth)
		sb.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys) // Go maps have no order; sorted is at least deterministic
		vals := make([]any, len(keys))
		for i, k := range keys {
			vals[i] = x[k]
		}
		return writePairs(keys, vals)
	default:
		rv := reflect.ValueOf(v)
		switch rv.Kind() {
		case reflect.Slice, reflect.Array:
			items := make([]any, rv.Len())
			for i := range items {
				items[i] = rv.Index(i).Interface()
			}
			return writePyJSON(sb, items, indent, depth, sortKeys)
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32:
			sb.WriteString(strconv.FormatInt(rv.Int(), 10))
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			sb.WriteString(strconv.FormatUint(rv.Uint(), 10))
		case reflect.Float32:
			sb.WriteString(pyFloat(rv.Float()))
		default:
			return fmt.Errorf("cannot serialize %T", v)
		}
	}
	return nil
}

// writePyString quotes like json.dumps(ensure_ascii=False): only ", \ and control characters are escaped.
func writePyString(sb *strings.Builder, s string) {
	sb.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			sb.WriteByte(c)
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				sb.WriteString(`\ufffd`)
			} else {
				sb.WriteString(s[i : i+size])
			}
			i += size
			continue
		}
		switch c {
		case '"':
			sb.WriteString(`\"`)
		case '\\':
			sb.WriteString(`\\`)
		case '\n':
			sb.WriteString(`\n`)
		case '\r':
			sb.WriteString(`\r`)
		case '\t':
			sb.WriteString(`\t`)
		case '\b':
			sb.WriteString(`\b`)
		case '\f':
			sb.WriteString(`\f`)
		default:
			fmt.Fprintf(sb, `\u%04x`, c)
		}
		i++
	}
	sb.WriteByte('"')
}

// pyFloat formats like Python's float repr: shortest round-trip digits, scientific below 1e-4 and from 1e16.
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	if f == 0 {
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	exp := int(math.Floor(math.Log10(math.Abs(f))))
	if exp < -4 || exp >= 16 {
		s := strconv.FormatFloat(f, 'e', -1, 64) // 1e+20, 1.5e-07
		mant, e, _ := strings.Cut(s, "e")
		sign := e[0]
		digits := strings.TrimLeft(e[1:], "0")
		if len(digits) < 2 {
			digits = strings.Repeat("0", 2-len(digits)) + digits
		}
		return mant + "e" + string(sign) + digits
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// strftime supports the directives chat templates use for dates (Llama-3.x: "%d %b %Y").
func strftime(t time.Time, format string) string {
	r := strings.NewReplacer("%Y", "2006", "%m", "01", "%d", "02", "%b", "Jan", "%B", "January", "%H", "15",
		"%M", "04", "%S", "05", "%y", "06", "%a", "Mon", "%A", "Monday", "%%", "%")
	return t.Format(r.Replace(format))
}
