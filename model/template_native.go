package model

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	json "github.com/goccy/go-json"
	"github.com/nikolalohinski/gonja/v2/exec"
)

// A nativeRenderer renders one known chat template without the Jinja engine. gonja costs ~10 µs per message, so a
// 100k-token conversation of 200 turns takes milliseconds to render while its tokenization, through the segment
// cache, takes a fraction of one. Like the hand-written pre-tokenizer, a native renderer is chosen only by an
// exact match of the template source (its SHA-256), and is tested against gonja on random conversations and
// against Jinja2 on the golden cases; any other template, or a change of one byte, renders through gonja.
type nativeRenderer func(w stringWriter, msgs []Message, opts ChatOptions) error

// stringWriter is what native renderers write to: *strings.Builder (Render) or *bytes.Buffer (EncodeChat).
type stringWriter interface {
	io.Writer
	io.StringWriter
}

// nativeTemplates maps the SHA-256 of a template source to its native renderer.
var nativeTemplates = map[string]nativeRenderer{
	// testdata/models/Qwen3-VL-2B-Instruct/chat_template.jinja (the fixture; Qwen-VL ChatML with vision parts).
	"735dfb6b3e163a91ec7eba25282d213f3c44831a18cf1e547dc5fc7f156b88f8": renderQwenVL,
	// The Qwen3 text template (tokenizer_config.json of the Qwen3 models, also the fixture's). Besides speed, the
	// native form avoids a gonja failure on it: a method call on an empty string result (an assistant message
	// ending in "</think>") does not evaluate.
	"87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5": renderQwen3,
}

// nativeKwargs are the template kwargs native renderers understand; any other kwarg sends a request to gonja.
var nativeKwargs = map[string]bool{"add_vision_id": true, "enable_thinking": true}

func sourceHash(src string) string {
	h := sha256.Sum256([]byte(src))
	return hex.EncodeToString(h[:])
}

// nativeFor returns the native renderer of src, or nil.
func nativeFor(src string) nativeRenderer { return nativeTemplates[sourceHash(src)] }

// errNotNative is returned by a native renderer, before writing anything, for input it leaves to gonja.
var errNotNative = errors.New("model: not for the native renderer")

func isDict(v any) bool {
	_, ok := v.(exec.Dict)
	return ok
}

func templateErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrTemplate, fmt.Sprintf(format, args...))
}

// nativeUsable reports whether opts can go through a native renderer.
func nativeUsable(msgs []Message, opts ChatOptions) bool {
	if len(msgs) == 0 {
		return false // messages[0] is undefined: leave the error (or not) to the engine
	}
	for k := range opts.Kwargs {
		if !nativeKwargs[k] {
			return false
		}
	}
	return true
}

// jinjaTruthy is Jinja's truth test for a kwarg value.
func jinjaTruthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case string:
		return x != ""
	case float64:
		return x != 0
	case int:
		return x != 0
	case int64:
		return x != 0
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return true
}

// qwenVLState is what the Qwen-VL template carries across messages.
type qwenVLState struct {
	sb             stringWriter
	visionID       bool // add_vision_id: "Picture N: " before each image
	images, videos int  // the template's namespace counters
}

// renderQwenVL is the native form of the fixture's chat_template.jinja: system (and the tools block) first, then
// user / assistant / tool messages in ChatML; image parts become <|vision_start|><|image_pad|><|vision_end|>.
func renderQwenVL(sb stringWriter, msgs []Message, opts ChatOptions) error {
	st := &qwenVLState{sb: sb, visionID: jinjaTruthy(opts.Kwargs["add_vision_id"])}
	sys := msgs[0].Role == "system"
	if len(opts.Tools) > 0 {
		sb.WriteString("<|im_start|>system\n")
		if sys {
			st.content(&msgs[0].Content, false)
			sb.WriteString("\n\n")
		}
		if err := writeTools(sb, opts.Tools); err != nil {
			return err
		}
	} else if sys {
		sb.WriteString("<|im_start|>system\n")
		st.content(&msgs[0].Content, false)
		sb.WriteString("<|im_end|>\n")
	}
	for i := range msgs {
		m := &msgs[i]
		switch m.Role {
		case "user":
			sb.WriteString("<|im_start|>user\n")
			st.content(&m.Content, true)
			sb.WriteString("<|im_end|>\n")
		case "assistant":
			sb.WriteString("<|im_start|>assistant\n")
			st.content(&m.Content, false)
			if err := writeToolCalls(sb, m.ToolCalls, contentTruthy(&m.Content)); err != nil {
				return err
			}
			sb.WriteString("<|im_end|>\n")
		case "tool":
			if i == 0 || msgs[i-1].Role != "tool" {
				sb.WriteString("<|im_start|>user")
			}
			sb.WriteString("\n<tool_response>\n")
			st.content(&m.Content, true)
			sb.WriteString("\n</tool_response>")
			if i == len(msgs)-1 || msgs[i+1].Role != "tool" {
				sb.WriteString("<|im_end|>\n")
			}
		}
	}
	if opts.AddGenerationPrompt {
		sb.WriteString("<|im_start|>assistant\n")
	}
	return nil
}

// writeTools writes the Qwen templates' tools section of the system message, from its heading to the
// message's end: each tool's JSON on a line of its own, then the tool-call instructions.
func writeTools(sb stringWriter, tools []json.RawMessage) error {
	sb.WriteString("# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>")
	for i, raw := range tools {
		v, err := orderedJSON(raw)
		if err != nil {
			return templateErrorf("tools[%d]: %v", i, err)
		}
		sb.WriteString("\n")
		if err := writeJSONTo(sb, v); err != nil {
			return templateErrorf("tools[%d]: %v", i, err)
		}
	}
	sb.WriteString("\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n")
	return nil
}

// writeToolCalls writes an assistant message's tool calls as the Qwen templates do: each in <tool_call>
// tags on a line of its own (the first after a newline only when content came before), its arguments
// re-serialized when they are a JSON object, verbatim otherwise.
func writeToolCalls(sb stringWriter, calls []ToolCall, afterContent bool) error {
	for k, tc := range calls {
		if k > 0 || afterContent {
			sb.WriteString("\n")
		}
		sb.WriteString("<tool_call>\n{\"name\": \"")
		sb.WriteString(tc.Function.Name)
		sb.WriteString("\", \"arguments\": ")
		if v, err := orderedJSON([]byte(tc.Function.Arguments)); err == nil && isDict(v) {
			if err := writeJSONTo(sb, v); err != nil {
				return templateErrorf("tool call arguments: %v", err)
			}
		} else {
			sb.WriteString(tc.Function.Arguments)
		}
		sb.WriteString("}\n</tool_call>")
	}
	return nil
}

// writeJSONTo writes v as the template's tojson does.
func writeJSONTo(w stringWriter, v any) error {
	var sb strings.Builder
	if err := writePyJSON(&sb, v, -1, 0, false); err != nil {
		return err
	}
	_, err := w.WriteString(sb.String())
	return err
}

// content writes a message content as the template does: the string itself, nothing for null, and for parts the
// text of text parts and, with vision, the placeholders of image and video parts.
func (st *qwenVLState) content(c *Content, vision bool) {
	if !c.IsParts {
		st.sb.WriteString(c.Text)
		return
	}
	for _, p := range c.Parts {
		switch partKind(p.Type) {
		case "image":
			if !vision {
				continue
			}
			st.images++
			if st.visionID {
				st.sb.WriteString("Picture ")
				st.sb.WriteString(strconv.Itoa(st.images))
				st.sb.WriteString(": ")
			}
			st.sb.WriteString("<|vision_start|><|image_pad|><|vision_end|>")
		case "video":
			if !vision {
				continue
			}
			st.videos++
			if st.visionID {
				st.sb.WriteString("Video ")
				st.sb.WriteString(strconv.Itoa(st.videos))
				st.sb.WriteString(": ")
			}
			st.sb.WriteString("<|vision_start|><|video_pad|><|vision_end|>")
		default:
			st.sb.WriteString(p.Text)
		}
	}
}

// partKind is the part's type as templateMessage presents it to a template.
func partKind(t string) string {
	switch t {
	case "image_url", "image", "input_image", "image_pil", "image_embeds":
		return "image"
	case "video_url", "video":
		return "video"
	}
	return t
}

// contentTruthy is Jinja's truth of message.content: a non-empty string or list.
func contentTruthy(c *Content) bool {
	if c.IsParts {
		return len(c.Parts) > 0
	}
	return !c.Null && c.Text != ""
}

// renderQwen3 is the native form of Qwen3's text template: ChatML, tools in the system turn, and the thinking rules:
// an assistant turn after the last real user query shows its reasoning in <think>...</think> (the last turn
// always), earlier ones drop it. It handles string contents only; anything else goes to gonja, as Jinja would
// fail or stringify a list there.
func renderQwen3(sb stringWriter, msgs []Message, opts ChatOptions) error {
	for i := range msgs {
		if msgs[i].Content.IsParts || msgs[i].Content.Null {
			return errNotNative
		}
	}
	if len(opts.Tools) > 0 {
		sb.WriteString("<|im_start|>system\n")
		if msgs[0].Role == "system" {
			sb.WriteString(msgs[0].Content.Text)
			sb.WriteString("\n\n")
		}
		if err := writeTools(sb, opts.Tools); err != nil {
			return err
		}
	} else if msgs[0].Role == "system" {
		sb.WriteString("<|im_start|>system\n")
		sb.WriteString(msgs[0].Content.Text)
		sb.WriteString("<|im_end|>\n")
	}
	lastQuery := len(msgs) - 1
	for i := len(msgs) - 1; i >= 0; i-- {
		c := msgs[i].Content.Text
		if msgs[i].Role == "user" && !(strings.HasPrefix(c, "<tool_response>") && strings.HasSuffix(c, "</tool_response>")) {
			lastQuery = i
			break
		}
	}
	for i := range msgs {
		m := &msgs[i]
		switch {
		case m.Role == "user" || (m.Role == "system" && i > 0):
			sb.WriteString("<|im_start|>")
			sb.WriteString(m.Role)
			sb.WriteString("\n")
			sb.WriteString(m.Content.Text)
			sb.WriteString("<|im_end|>\n")
		case m.Role == "assistant":
			content, reasoning := m.Content.Text, ""
			if m.ReasoningContent != "" {
				reasoning = m.ReasoningContent
			} else if strings.Contains(content, "</think>") {
				whole := content
				content = strings.TrimLeft(whole[strings.LastIndex(whole, "</think>")+len("</think>"):], "\n")
				before := strings.TrimRight(whole[:strings.Index(whole, "</think>")], "\n")
				if k := strings.LastIndex(before, "<think>"); k >= 0 {
					before = before[k+len("<think>"):]
				}
				reasoning = strings.TrimLeft(before, "\n")
			}
			sb.WriteString("<|im_start|>assistant\n")
			if i > lastQuery && (i == len(msgs)-1 || reasoning != "") {
				sb.WriteString("<think>\n")
				sb.WriteString(strings.Trim(reasoning, "\n"))
				sb.WriteString("\n</think>\n\n")
				sb.WriteString(strings.TrimLeft(content, "\n"))
			} else {
				sb.WriteString(content)
			}
			if err := writeToolCalls(sb, m.ToolCalls, content != ""); err != nil {
				return err
			}
			sb.WriteString("<|im_end|>\n")
		case m.Role == "tool":
			if i == 0 || msgs[i-1].Role != "tool" {
				sb.WriteString("<|im_start|>user")
			}
			sb.WriteString("\n<tool_response>\n")
			sb.WriteString(m.Content.Text)
			sb.WriteString("\n</tool_response>")
			if i == len(msgs)-1 || msgs[i+1].Role != "tool" {
				sb.WriteString("<|im_end|>\n")
			}
		}
	}
	if opts.AddGenerationPrompt {
		sb.WriteString("<|im_start|>assistant\n")
		if v, ok := opts.Kwargs["enable_thinking"].(bool); ok && !v {
			sb.WriteString("<think>\n\n</think>\n\n")
		}
	}
	return nil
}
