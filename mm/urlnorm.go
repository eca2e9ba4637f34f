package mm

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// NormalizeURL returns the WHATWG serialization of raw, the string Dynamo hashes for an image URL
// (Rust url::Url::as_str): leading and trailing C0 controls and spaces
// trimmed, ASCII tab and newline removed, scheme and (special-scheme) host lowercased, default ports
// dropped, dot segments resolved, an empty special path written "/", and the characters of the WHATWG
// percent-encode sets escaped per component. Existing %XX escapes and the query are kept as they are.
//
// Not reproduced: IDNA (a host with non-ASCII characters is refused with ErrBadURL, so its image gets
// no routing entry rather than a hash that could differ from Dynamo's) and Windows drive-letter
// quirks of file: URLs. An already-canonical URL is returned unchanged and without allocation.
func NormalizeURL(raw string) (string, error) {
	if canonicalHTTP(raw) || canonicalData(raw) {
		return raw, nil
	}
	s := stripURL(raw)
	colon := strings.IndexByte(s, ':')
	if colon <= 0 || !validScheme(s[:colon]) {
		return "", fmt.Errorf("%w: no scheme", ErrBadURL)
	}
	scheme := strings.ToLower(s[:colon])
	rest := s[colon+1:]
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(scheme)
	b.WriteByte(':')
	special := isSpecialScheme(scheme)
	var err error
	switch {
	case scheme == "file":
		rest, err = writeFileHierarchy(&b, rest)
	case special:
		rest, err = writeSpecialHierarchy(&b, scheme, rest)
	case strings.HasPrefix(rest, "//"):
		rest, err = writeAuthorityHierarchy(&b, scheme, rest[2:])
	default:
		rest = writeOpaquePath(&b, rest)
	}
	if err != nil {
		return "", err
	}
	writeQueryFragment(&b, rest, special)
	out := b.String()
	if out == raw {
		return raw, nil
	}
	return out, nil
}

// stripURL removes leading and trailing C0 controls and spaces, and every tab and newline inside.
func stripURL(raw string) string {
	s := strings.TrimFunc(raw, func(r rune) bool { return r <= 0x20 })
	if strings.ContainsAny(s, "\t\n\r") {
		s = strings.Map(func(r rune) rune {
			if r == '\t' || r == '\n' || r == '\r' {
				return -1
			}
			return r
		}, s)
	}
	return s
}

// splitAt returns the prefix of s before the first byte of any of chars, and the rest.
func splitAt(s, chars string) (string, string) {
	end := strings.IndexAny(s, chars)
	if end < 0 {
		end = len(s)
	}
	return s[:end], s[end:]
}

// writeFileHierarchy writes a file: URL's host and path; file: has an optional host ("localhost" is
// written as none) and no port or userinfo. It returns what follows the path.
func writeFileHierarchy(b *strings.Builder, rest string) (string, error) {
	rest = strings.ReplaceAll(rest, "\\", "/")
	host := ""
	if strings.HasPrefix(rest, "//") {
		var h0 string
		h0, rest = splitAt(rest[2:], "/?#")
		h, err := serializeHost(h0, true)
		if err != nil && h0 != "" {
			return "", err
		}
		if h != "localhost" {
			host = h
		}
	}
	b.WriteString("//")
	b.WriteString(host)
	path, rest := splitAt(rest, "?#")
	writePath(b, path, true)
	return rest, nil
}

// writeSpecialHierarchy writes the authority and path of a special scheme (http, https, ws, wss, ftp),
// where any run of slashes or backslashes starts the authority.
func writeSpecialHierarchy(b *strings.Builder, scheme, rest string) (string, error) {
	auth, rest := splitAt(strings.TrimLeft(rest, "/\\"), "/\\?#")
	if err := writeAuthority(b, scheme, auth, true); err != nil {
		return "", err
	}
	path, rest := splitAt(rest, "?#")
	writePath(b, path, true)
	return rest, nil
}

// writeAuthorityHierarchy writes the authority and path of a non-special scheme written with "//"
// (rest starts after it).
func writeAuthorityHierarchy(b *strings.Builder, scheme, rest string) (string, error) {
	auth, rest := splitAt(rest, "/?#")
	if err := writeAuthority(b, scheme, auth, false); err != nil {
		return "", err
	}
	path, rest := splitAt(rest, "?#")
	if path != "" {
		writePath(b, path, false)
	}
	return rest, nil
}

// writeOpaquePath writes an opaque path (data:, mailto:): only C0 controls and non-ASCII are escaped;
// trailing spaces go when nothing follows.
func writeOpaquePath(b *strings.Builder, rest string) string {
	p, rest := splitAt(rest, "?#")
	if rest == "" {
		p = strings.TrimRight(p, " ")
	}
	appendEscaped(b, p, encC0)
	return rest
}

// writeQueryFragment writes the query ("?...") and fragment ("#...") that rest starts with, if any.
func writeQueryFragment(b *strings.Builder, rest string, special bool) {
	if strings.HasPrefix(rest, "?") {
		var q string
		q, rest = splitAt(rest[1:], "#")
		b.WriteByte('?')
		set := encQuery
		if special {
			set = encSpecialQuery
		}
		appendEscaped(b, q, set)
	}
	if strings.HasPrefix(rest, "#") {
		b.WriteByte('#')
		appendEscaped(b, rest[1:], encFragment)
	}
}

func validScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

func isSpecialScheme(s string) bool {
	switch s {
	case "http", "https", "ws", "wss", "ftp", "file":
		return true
	}
	return false
}

func defaultPort(scheme string) string {
	switch scheme {
	case "http", "ws":
		return "80"
	case "https", "wss":
		return "443"
	case "ftp":
		return "21"
	}
	return ""
}

func writeAuthority(b *strings.Builder, scheme, auth string, special bool) error {
	b.WriteString("//")
	if at := strings.LastIndexByte(auth, '@'); at >= 0 {
		userinfo := auth[:at]
		auth = auth[at+1:]
		user, pass, hasPass := strings.Cut(userinfo, ":")
		appendEscaped(b, user, encUserinfo)
		if hasPass && pass != "" {
			b.WriteByte(':')
			appendEscaped(b, pass, encUserinfo)
		}
		if user != "" || (hasPass && pass != "") {
			b.WriteByte('@')
		}
	}
	host, port := auth, ""
	if strings.HasPrefix(auth, "[") {
		end := strings.IndexByte(auth, ']')
		if end < 0 {
			return fmt.Errorf("%w: unterminated IPv6 host", ErrBadURL)
		}
		host, port = auth[:end+1], auth[end+1:]
		if port != "" && port[0] != ':' {
			return fmt.Errorf("%w: bad port", ErrBadURL)
		}
		if port != "" {
			port = port[1:]
		}
	} else if i := strings.LastIndexByte(auth, ':'); i >= 0 {
		host, port = auth[:i], auth[i+1:]
	}
	h, err := serializeHost(host, special)
	if err != nil {
		return err
	}
	if special && h == "" && scheme != "file" {
		return fmt.Errorf("%w: empty host", ErrBadURL)
	}
	b.WriteString(h)
	if port != "" {
		n, err := strconv.ParseUint(port, 10, 32)
		if err != nil || n > 65535 {
			return fmt.Errorf("%w: bad port %q", ErrBadURL, port)
		}
		p := strconv.FormatUint(n, 10)
		if p != defaultPort(scheme) {
			b.WriteByte(':')
			b.WriteString(p)
		}
	}
	return nil
}

func serializeHost(host string, special bool) (string, error) {
	if strings.HasPrefix(host, "[") {
		addr, ok := parseIPv6Literal(host[1 : len(host)-1])
		if !ok {
			return "", fmt.Errorf("%w: bad IPv6 host", ErrBadURL)
		}
		return "[" + addr + "]", nil
	}
	if !special {
		// Opaque host: forbidden host code points fail the parse, the rest is C0-escaped.
		for i := 0; i < len(host); i++ {
			if c := host[i]; c == 0 || c == '\t' || c == '\n' || c == '\r' || strings.IndexByte(" #/:<>?@[\\]^|", c) >= 0 {
				return "", fmt.Errorf("%w: forbidden host code point %q", ErrBadURL, c)
			}
		}
		var b strings.Builder
		appendEscaped(&b, host, encC0)
		return b.String(), nil
	}
	h, err := percentDecode(host)
	if err != nil {
		return "", err
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if c >= 0x80 {
			return "", fmt.Errorf("%w: non-ASCII host needs IDNA", ErrBadURL)
		}
		if c <= 0x20 || c == 0x7f || strings.IndexByte("#%/:<>?@[\\]^|", c) >= 0 {
			return "", fmt.Errorf("%w: forbidden host code point %q", ErrBadURL, c)
		}
	}
	h = strings.ToLower(h)
	if v4, ok, err := parseIPv4Host(h); err != nil {
		return "", err
	} else if ok {
		return v4, nil
	}
	return h, nil
}

// parseIPv4Host applies the WHATWG IPv4 parser when the last label is numeric ("0x7f.1" → 127.0.0.1).
func parseIPv4Host(h string) (string, bool, error) {
	parts := strings.Split(h, ".")
	if len(parts) > 1 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	last := parts[len(parts)-1]
	if last == "" || !ipv4Number(last) {
		return "", false, nil
	}
	if len(parts) > 4 {
		return "", false, fmt.Errorf("%w: bad IPv4 host", ErrBadURL)
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		if p == "" || !ipv4Number(p) {
			return "", false, fmt.Errorf("%w: bad IPv4 host", ErrBadURL)
		}
		base, digits := 10, p
		if len(p) >= 2 && (p[:2] == "0x" || p[:2] == "0X") {
			base, digits = 16, p[2:]
		} else if len(p) >= 2 && p[0] == '0' {
			base, digits = 8, p[1:]
		}
		if digits == "" {
			nums[i] = 0
			continue
		}
		n, err := strconv.ParseUint(digits, base, 64)
		if err != nil {
			return "", false, fmt.Errorf("%w: bad IPv4 host", ErrBadURL)
		}
		nums[i] = n
	}
	for _, n := range nums[:len(nums)-1] {
		if n > 255 {
			return "", false, fmt.Errorf("%w: bad IPv4 host", ErrBadURL)
		}
	}
	if nums[len(nums)-1] >= 1<<(8*(5-len(nums))) {
		return "", false, fmt.Errorf("%w: bad IPv4 host", ErrBadURL)
	}
	v := nums[len(nums)-1]
	for i, n := range nums[:len(nums)-1] {
		v += n << (8 * (3 - i))
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}).String(), true, nil
}

func ipv4Number(p string) bool {
	if len(p) >= 2 && (p[:2] == "0x" || p[:2] == "0X") {
		for i := 2; i < len(p); i++ {
			if !isHex(p[i]) {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func percentDecode(s string) (string, error) {
	if strings.IndexByte(s, '%') < 0 {
		return s, nil
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			v, _ := strconv.ParseUint(s[i+1:i+3], 16, 8)
			out = append(out, byte(v))
			i += 2
			continue
		}
		out = append(out, s[i])
	}
	return string(out), nil
}

// writePath writes the path with "." and ".." segments (also %2e forms) resolved; special schemes treat
// '\' as '/' and always have a leading "/".
func writePath(b *strings.Builder, p string, special bool) {
	if special {
		p = strings.ReplaceAll(p, "\\", "/")
	}
	p = strings.TrimPrefix(p, "/")
	segs := strings.Split(p, "/")
	out := make([]string, 0, len(segs))
	for i, seg := range segs {
		lastSeg := i == len(segs)-1
		switch {
		case isDoubleDot(seg):
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			if lastSeg {
				out = append(out, "")
			}
		case isSingleDot(seg):
			if lastSeg {
				out = append(out, "")
			}
		default:
			out = append(out, seg)
		}
	}
	if len(out) == 0 {
		if special {
			b.WriteByte('/')
		}
		return
	}
	for _, seg := range out {
		b.WriteByte('/')
		appendEscaped(b, seg, encPath)
	}
}

func isSingleDot(s string) bool { return s == "." || strings.EqualFold(s, "%2e") }

func isDoubleDot(s string) bool {
	switch strings.ToLower(s) {
	case "..", ".%2e", "%2e.", "%2e%2e":
		return true
	}
	return false
}

// Percent-encode sets as rust-url defines them (its PATH set lacks WHATWG's '^'), as bit tables over ASCII; bytes >= 0x7F are always
// escaped.
type encodeSet [2]uint64

func (e *encodeSet) has(c byte) bool {
	if c >= 0x7f {
		return true
	}
	return e[c>>6]&(1<<(c&63)) != 0
}

func makeSet(base *encodeSet, extra string) encodeSet {
	var e encodeSet
	if base != nil {
		e = *base
	}
	for i := 0; i < len(extra); i++ {
		c := extra[i]
		e[c>>6] |= 1 << (c & 63)
	}
	return e
}

var (
	encC0           = makeSet(nil, "\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f")
	encFragment     = makeSet(&encC0, " \"<>`")
	encQuery        = makeSet(&encC0, " \"#<>")
	encSpecialQuery = makeSet(&encQuery, "'")
	encPath         = makeSet(&encQuery, "?`{}")
	encUserinfo     = makeSet(&encPath, "/:;=@[\\]^|")
)

func appendEscaped(b *strings.Builder, s string, set encodeSet) {
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if set.has(c) {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
			continue
		}
		b.WriteByte(c)
	}
}

// parseIPv6Literal parses the inside of [..] and serializes it the WHATWG way: lowercase hex pieces,
// the first longest run of two or more zero pieces compressed to "::", no embedded IPv4 form.
func parseIPv6Literal(s string) (string, bool) {
	if strings.Contains(s, "%") { // zone ids are not allowed in URLs
		return "", false
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() {
		return "", false
	}
	b := a.As16()
	var pieces [8]uint16
	for i := range pieces {
		pieces[i] = uint16(b[2*i])<<8 | uint16(b[2*i+1])
	}
	bestStart, bestLen := -1, 1
	for i := 0; i < 8; {
		if pieces[i] != 0 {
			i++
			continue
		}
		j := i
		for j < 8 && pieces[j] == 0 {
			j++
		}
		if j-i > bestLen {
			bestStart, bestLen = i, j-i
		}
		i = j
	}
	var out strings.Builder
	for i := 0; i < 8; i++ {
		if i == bestStart {
			if i == 0 {
				out.WriteByte(':')
			}
			out.WriteByte(':')
			i += bestLen - 1
			continue
		}
		out.WriteString(strconv.FormatUint(uint64(pieces[i]), 16))
		if i != 7 {
			out.WriteByte(':')
		}
	}
	return out.String(), true
}

// canonicalHTTP is the fast path: an http(s) URL with a lowercase host name, no port, no userinfo, no
// fragment, no dot segments and no byte that serialization would change is already canonical.
func canonicalHTTP(s string) bool {
	var rest string
	switch {
	case strings.HasPrefix(s, "https://"):
		rest = s[8:]
	case strings.HasPrefix(s, "http://"):
		rest = s[7:]
	default:
		return false
	}
	i := strings.IndexByte(rest, '/')
	if i <= 0 {
		return false
	}
	hostport := rest[:i]
	host, port, hasPort := strings.Cut(hostport, ":")
	if host == "" || host[len(host)-1] == '.' {
		return false
	}
	for j := 0; j < len(host); j++ {
		c := host[j]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	// A host whose last label starts with a digit is an IPv4 form; only the canonical dotted quad
	// stays on the fast path ("0x7f.1" and "2130706433" are rewritten by the full parser).
	if last := host[strings.LastIndexByte(host, '.')+1]; (last < 'a' || last > 'z') && !canonicalIPv4(host) {
		return false
	}
	if hasPort {
		if port == "" || port[0] == '0' || len(port) > 5 {
			return false
		}
		n := 0
		for j := 0; j < len(port); j++ {
			if port[j] < '0' || port[j] > '9' {
				return false
			}
			n = n*10 + int(port[j]-'0')
		}
		if n > 65535 || (n == 80 && s[4] == ':') || (n == 443 && s[4] == 's') {
			return false
		}
	}
	inQuery := false
	for j := i; j < len(rest); j++ {
		c := rest[j]
		switch {
		case c <= 0x20 || c >= 0x7f || c == '#' || c == '\\':
			return false
		case c == '?':
			inQuery = true
		case inQuery:
			if encSpecialQuery.has(c) {
				return false
			}
		case c == '/':
			if j+1 < len(rest) && (rest[j+1] == '.' || rest[j+1] == '%') {
				return false
			}
		case encPath.has(c):
			return false
		}
	}
	return true
}

// canonicalIPv4 reports whether s is four decimal octets without leading zeros.
func canonicalIPv4(s string) bool {
	parts := 0
	for len(s) > 0 {
		end := strings.IndexByte(s, '.')
		if end < 0 {
			end = len(s)
		}
		p := s[:end]
		if p == "" || len(p) > 3 || (len(p) > 1 && p[0] == '0') {
			return false
		}
		n := 0
		for j := 0; j < len(p); j++ {
			if p[j] < '0' || p[j] > '9' {
				return false
			}
			n = n*10 + int(p[j]-'0')
		}
		if n > 255 {
			return false
		}
		parts++
		if end == len(s) {
			break
		}
		s = s[end+1:]
		if s == "" {
			return false
		}
	}
	return parts == 4
}

// canonicalData is the fast path for data: URIs (which can be megabytes): lowercase scheme and only
// printable ASCII that no percent-encode set touches, and no '?' or '#' (whose components have other
// sets). A base64 image URI always qualifies.
func canonicalData(s string) bool {
	if !strings.HasPrefix(s, "data:") {
		return false
	}
	for i := 5; i < len(s); i++ {
		c := s[i]
		if c <= 0x20 || c >= 0x7f || c == '"' || c == '<' || c == '>' || c == '`' || c == '#' || c == '?' || c == '\'' {
			return false
		}
	}
	return true
}
