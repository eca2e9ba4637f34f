package openai

import (
	"errors"

	json "github.com/goccy/go-json"

	"github.com/kvroute/kvroute/model"
	"github.com/kvroute/kvroute/workers/oaiwire"
)

// scanMedia locates the media content parts of a chat body: messages[i].content[j] objects whose type is
// a media type, with their url and uuid. Called only when the decoded messages have media parts.
func scanMedia(b []byte) ([]MediaPart, error) {
	msgs, ok, _, err := oaiwire.FindField(b, "messages")
	if err != nil || !ok {
		return nil, err
	}
	var out []MediaPart
	mi := 0
	err = oaiwire.EachElem(b, msgs.ValStart, func(ms, _ int) error {
		defer func() { mi++ }()
		if b[ms] != '{' {
			return nil
		}
		var content oaiwire.Field
		has := false
		if _, err := oaiwire.EachField(b, ms, func(f oaiwire.Field) bool {
			if oaiwire.KeyIs(b, f, "content") {
				content, has = f, true
			}
			return true
		}); err != nil {
			return err
		}
		if !has || b[content.ValStart] != '[' {
			return nil
		}
		pi := 0
		return oaiwire.EachElem(b, content.ValStart, func(ps, _ int) error {
			defer func() { pi++ }()
			if b[ps] != '{' {
				return nil
			}
			p := MediaPart{Message: mi, Part: pi, uuidStart: -1, urlStart: -1}
			var typ, media oaiwire.Field
			var hasType, hasMedia bool
			end, err := oaiwire.EachField(b, ps, func(f oaiwire.Field) bool {
				switch {
				case oaiwire.KeyIs(b, f, "type"):
					typ, hasType = f, true
				case oaiwire.KeyIs(b, f, "uuid"):
					p.uuidStart, p.uuidEnd, p.HasUUID = f.ValStart, f.ValEnd, true
				case oaiwire.KeyIs(b, f, "image_url"), oaiwire.KeyIs(b, f, "video_url"), oaiwire.KeyIs(b, f, "audio_url"):
					media, hasMedia = f, true
				}
				return true
			})
			if err != nil {
				return err
			}
			if !hasType || json.Unmarshal(b[typ.ValStart:typ.ValEnd], &p.Type) != nil || !isMediaType(p.Type) {
				return nil
			}
			p.end = end
			if p.HasUUID && b[p.uuidStart] == '"' {
				_ = json.Unmarshal(b[p.uuidStart:p.uuidEnd], &p.UUID)
			}
			if hasMedia {
				raw := b[media.ValStart:media.ValEnd]
				if raw[0] == '"' {
					_ = json.Unmarshal(raw, &p.URL)
					p.urlStart, p.urlEnd = media.ValStart, media.ValEnd
				} else if raw[0] == '{' {
					var u struct {
						URL string `json:"url"`
					}
					_ = model.UnmarshalExact(raw, &u)
					p.URL = u.URL
					p.urlStart, p.urlEnd = urlString(b, media.ValStart, p.URL)
				}
				if p.URL == "" {
					p.urlStart = -1
				}
			}
			out = append(out, p)
			return nil
		})
	})
	if err != nil {
		return nil, errors.New("malformed messages")
	}
	return out, nil
}

// urlString bounds the string value of the "url" member of the object at obj whose text decodes to
// url (the one the decoder read); -1 when there is none.
func urlString(b []byte, obj int, url string) (start, end int) {
	start, end = -1, -1
	_, _ = oaiwire.EachField(b, obj, func(f oaiwire.Field) bool {
		var s string
		if oaiwire.KeyIs(b, f, "url") && b[f.ValStart] == '"' && json.Unmarshal(b[f.ValStart:f.ValEnd], &s) == nil && s == url {
			start, end = f.ValStart, f.ValEnd
		}
		return true
	})
	return start, end
}

// SetMediaUUIDs returns a copy of a chat body with uuids[i] as the "uuid" of media part i (in the order
// of ChatRequest.Media); "" leaves a part as it is. Only the uuid members change: an existing one gets
// the new value, otherwise `,"uuid":"..."` is inserted before the part's closing brace. media must come
// from ParseChat of this same body.
func SetMediaUUIDs(body []byte, media []MediaPart, uuids []string) ([]byte, error) {
	if len(uuids) != len(media) {
		return nil, errorf(ErrBadRequest, "messages", "%d uuids for %d media parts", len(uuids), len(media))
	}
	extra := 0
	for _, u := range uuids {
		extra += len(u) + 12
	}
	out := make([]byte, 0, len(body)+extra)
	prev := 0
	for i, p := range media {
		u := uuids[i]
		if u == "" || (p.HasUUID && p.UUID == u) {
			continue
		}
		if p.end < prev || p.end >= len(body) || body[p.end] != '}' {
			return nil, errorf(ErrBadRequest, "messages", "media parts do not belong to this body")
		}
		if p.HasUUID {
			out = append(out, body[prev:p.uuidStart]...)
			out = oaiwire.AppendString(out, u)
			prev = p.uuidEnd
			continue
		}
		out = append(out, body[prev:p.end]...)
		out = append(out, `,"uuid":`...)
		out = oaiwire.AppendString(out, u)
		prev = p.end
	}
	return append(out, body[prev:]...), nil
}

// RewriteMedia is SetMediaUUIDs plus two more edits per part, in the same single pass: urls[i], when
// not "", replaces the string value of part i's URL (the frontend inlines an image it downloaded as a
// data: URI, so the worker need not fetch it again); members[i], when non-nil, is inserted as
// `,"<key>":<members[i]>` (raw JSON) before part i's closing brace (the mm_kwargs transfer descriptor).
// urls may be nil (no URL changes).
func RewriteMedia(body []byte, media []MediaPart, uuids, urls []string, key string, members [][]byte) ([]byte, error) {
	if len(uuids) != len(media) || len(members) != len(media) || (urls != nil && len(urls) != len(media)) {
		return nil, errorf(ErrBadRequest, "messages", "%d uuids, %d urls and %d members for %d media parts", len(uuids), len(urls), len(members), len(media))
	}
	extra := 0
	for i := range media {
		extra += len(uuids[i]) + 12 + len(key) + len(members[i]) + 4
		if urls != nil {
			extra += len(urls[i]) + 2
		}
	}
	out := make([]byte, 0, len(body)+extra)
	prev := 0
	type replace struct {
		start, end int
		val        string
	}
	for i, p := range media {
		u := uuids[i]
		if p.end < prev || p.end >= len(body) || body[p.end] != '}' {
			return nil, errorf(ErrBadRequest, "messages", "media parts do not belong to this body")
		}
		// The replaced values in body order (the url and an existing uuid may come in either order), then
		// the inserted members before the closing brace.
		var reps [2]replace
		n := 0
		if urls != nil && urls[i] != "" && p.urlStart >= 0 {
			reps[n] = replace{p.urlStart, p.urlEnd, urls[i]}
			n++
		}
		insertUUID := false
		switch {
		case u == "" || (p.HasUUID && p.UUID == u):
		case p.HasUUID:
			reps[n] = replace{p.uuidStart, p.uuidEnd, u}
			n++
		default:
			insertUUID = true
		}
		if n == 2 && reps[1].start < reps[0].start {
			reps[0], reps[1] = reps[1], reps[0]
		}
		for _, r := range reps[:n] {
			if r.start < prev || r.end > p.end {
				return nil, errorf(ErrBadRequest, "messages", "media parts do not belong to this body")
			}
			out = append(out, body[prev:r.start]...)
			out = oaiwire.AppendString(out, r.val)
			prev = r.end
		}
		if insertUUID {
			out = append(out, body[prev:p.end]...)
			out = append(out, `,"uuid":`...)
			out = oaiwire.AppendString(out, u)
			prev = p.end
		}
		if members[i] != nil {
			out = append(out, body[prev:p.end]...)
			out = append(out, ',')
			out = oaiwire.AppendString(out, key)
			out = append(out, ':')
			out = append(out, members[i]...)
			prev = p.end
		}
	}
	return append(out, body[prev:]...), nil
}

// sameMedia reports whether the media parts the decoder saw (msgs) are the ones the scanner located:
// the same positions, types and image/video URLs. The guard checks the scanner's URLs and the
// forwarded body is rewritten at the scanner's offsets, so a body the two read differently is refused.
func sameMedia(msgs []model.Message, media []MediaPart) bool {
	k := 0
	for i := range msgs {
		for j, p := range msgs[i].Content.Parts {
			if !isMediaType(p.Type) {
				continue
			}
			if k >= len(media) {
				return false
			}
			m := media[k]
			k++
			if m.Message != i || m.Part != j || m.Type != p.Type {
				return false
			}
			var url string
			switch {
			case p.ImageURL != nil:
				url = p.ImageURL.URL
			case p.VideoURL != nil:
				url = p.VideoURL.URL
			}
			if (p.Type == "image_url" || p.Type == "video_url") && url != m.URL {
				return false
			}
		}
	}
	return k == len(media)
}
