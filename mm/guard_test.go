package mm

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
)

func TestGuardCheckAddr(t *testing.T) {
	g, err := NewGuard(nil)
	if err != nil {
		t.Fatal(err)
	}
	blocked := []string{
		"127.0.0.1", "127.1.2.3", "10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.169.254",
		"100.64.0.1", "100.127.255.254", "0.0.0.0", "192.0.0.170", "192.0.2.1", "198.18.0.1", "198.51.100.7",
		"203.0.113.9", "224.0.0.1", "240.0.0.1", "255.255.255.255",
		"::", "::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "fc00::1", "fd00:ec2::254", "fe80::1", "ff02::1",
		"64:ff9b::a9fe:a9fe",
	}
	for _, a := range blocked {
		if err := g.CheckAddr(netip.MustParseAddr(a)); !errors.Is(err, ErrBlockedAddress) {
			t.Errorf("%s not blocked: %v", a, err)
		}
	}
	for _, a := range []string{"8.8.8.8", "1.1.1.1", "172.32.0.1", "100.128.0.1", "2606:4700::1111", "::ffff:8.8.8.8"} {
		if err := g.CheckAddr(netip.MustParseAddr(a)); err != nil {
			t.Errorf("%s blocked: %v", a, err)
		}
	}
}

func TestGuardAllowList(t *testing.T) {
	g, err := NewGuard([]string{"127.0.0.1", "10.1.0.0/16", "fd00::/8", "Images.Internal", ""})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1", true}, {"127.0.0.2", false}, {"10.1.200.3", true}, {"10.2.0.1", false},
		{"fd12::1", true}, {"fc00::1", false}, {"::ffff:127.0.0.1", true},
	}
	for _, tc := range tests {
		err := g.CheckAddr(netip.MustParseAddr(tc.addr))
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.addr, err)
		}
	}
	if err := g.CheckHost("images.internal."); err != nil {
		t.Errorf("allowed host name refused: %v", err)
	}
	if err := g.control(true)("tcp", "10.9.9.9:80", nil); err != nil {
		t.Errorf("allowed-by-name dial refused: %v", err)
	}
	if _, err := NewGuard([]string{"not a host/x"}); err == nil {
		t.Error("bad entry accepted")
	}
}

func TestGuardHostsAndControl(t *testing.T) {
	g, _ := NewGuard(nil)
	for _, h := range []string{"localhost", "LOCALHOST.", "foo.localhost", "metadata.google.internal", "metadata", "127.0.0.1", "::1", "169.254.169.254"} {
		if err := g.CheckHost(h); !errors.Is(err, ErrBlockedAddress) {
			t.Errorf("host %s: %v", h, err)
		}
	}
	if err := g.CheckHost("example.com"); err != nil {
		t.Error(err)
	}
	// The connect-time hook sees resolved addresses, whatever name the URL used.
	ctl := g.control(false)
	for _, a := range []string{"127.0.0.1:80", "[::1]:443", "10.0.0.5:8080", "[fe80::1%eth0]:80"} {
		if err := ctl("tcp", a, nil); !errors.Is(err, ErrBlockedAddress) {
			t.Errorf("control %s: %v", a, err)
		}
	}
	if err := ctl("tcp", "93.184.216.34:443", nil); err != nil {
		t.Error(err)
	}
}

// TestProbeSSRF: without the allow-list a loopback server is refused before any request; a redirect
// from an allowed server to internal or metadata addresses is refused.
func TestProbeSSRF(t *testing.T) {
	srv := newImageServer(t, map[string][]byte{"/a.png": encodePNG(t, 4, 4)})
	p := newTestProber(t, nil)
	if _, err := probe(t, p, srv.URL+"/a.png"); !errors.Is(err, ErrBlockedAddress) {
		t.Fatalf("loopback without allow: %v", err)
	}
	if srv.requests.Load() != 0 {
		t.Fatal("request reached the blocked server")
	}
	targets := []string{
		"http://10.0.0.1/a.png",
		"http://169.254.169.254/latest/meta-data/",
		"http://[::1]/a.png",
		"http://localhost/a.png",
		"http://metadata.google.internal/computeMetadata/v1/",
		srv.URL + "/a.png", // loopback and allowed: followed
	}
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(r.URL.Query().Get("t"))
		http.Redirect(w, r, targets[i], http.StatusFound)
	}))
	t.Cleanup(redir.Close)
	allowed := newTestProber(t, nil, "127.0.0.1")
	for i, target := range targets[:5] {
		if _, err := probe(t, allowed, redir.URL+"/r?t="+strconv.Itoa(i)); !errors.Is(err, ErrBlockedAddress) {
			t.Errorf("redirect to %s: %v", target, err)
		}
	}
	// A redirect to an allowed address is followed.
	if sz, err := probe(t, allowed, redir.URL+"/r?t=5"); err != nil || sz != (Size{4, 4}) {
		t.Errorf("allowed redirect: %v %v", sz, err)
	}
	if allowed.Stats().Blocked != 5 {
		t.Errorf("stats %+v", allowed.Stats())
	}
}

func TestParseAllowHosts(t *testing.T) {
	got := ParseAllowHosts(" 127.0.0.1, images.internal ,,10.0.0.0/8 ")
	if len(got) != 3 || got[0] != "127.0.0.1" || got[1] != "images.internal" || got[2] != "10.0.0.0/8" {
		t.Fatalf("got %q", got)
	}
	if ParseAllowHosts("") != nil {
		t.Fatal("empty flag gives entries")
	}
}

// CheckURL reads hosts as the WHATWG parser does (numeric IPv4 forms are addresses, as to glibc and
// vLLM) and refuses whatever another parser could read as an internal host.
func TestGuardCheckURL(t *testing.T) {
	g, err := NewGuard(nil)
	if err != nil {
		t.Fatal(err)
	}
	refused := []struct {
		url  string
		want error
	}{
		{"http://2130706433/x.png", ErrBlockedAddress},
		{"http://127.1/x.png", ErrBlockedAddress},
		{"http://0x7f.1/x.png", ErrBlockedAddress},
		{"http://017700000001/x.png", ErrBlockedAddress},
		{"http://0/x.png", ErrBlockedAddress},
		{"http://0x7f000001/", ErrBlockedAddress},
		{"HTTP://127.0.0.1:8080/x.png", ErrBlockedAddress},
		{" http://127.0.0.1/x.png", ErrBlockedAddress},
		{"http://%31%32%37.0.0.1/", ErrBlockedAddress},
		{"http://[::1]/x.png", ErrBlockedAddress},
		{"http://[::ffff:127.0.0.1]/x.png", ErrBlockedAddress},
		{"http://[::ffff:7f00:1]/x.png", ErrBlockedAddress},
		{"http://localhost/x.png", ErrBlockedAddress},
		{"http://a.localhost./x.png", ErrBlockedAddress},
		{"http://169.254.169.254/latest/meta-data/", ErrBlockedAddress},
		{"http://metadata.google.internal/", ErrBlockedAddress},
		{"http://user@127.0.0.1/x.png", ErrBlockedAddress},
		{"http://8.8.8.8@127.0.0.1/x.png", ErrBlockedAddress},
		{"http://8.8.8.8\\@127.0.0.1/x.png", ErrBlockedAddress},
		{"http://x.invalid/x.png", ErrBlockedAddress}, // does not resolve: not guessed at
		{"file:///etc/passwd", ErrUnsupportedScheme},
		{"gopher://8.8.8.8/", ErrUnsupportedScheme},
		{"http://", ErrBadURL},
		{"http://256.256.256.256/", ErrBadURL},
		{"nonsense", ErrBadURL},
	}
	for _, tc := range refused {
		if err := g.CheckURL(context.Background(), tc.url); !errors.Is(err, tc.want) {
			t.Errorf("%q: %v, want %v", tc.url, err, tc.want)
		}
	}
	for _, u := range []string{"http://8.8.8.8/x.png", "https://1.1.1.1:8443/a/../b.jpg?q=1", "data:image/png;base64,iVBORw0KGgo="} {
		if err := g.CheckURL(context.Background(), u); err != nil {
			t.Errorf("%q refused: %v", u, err)
		}
	}
	allow, err := NewGuard([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := allow.CheckURL(context.Background(), "http://127.1:8080/x.png"); err != nil {
		t.Errorf("allowed address in numeric form refused: %v", err)
	}
	if err := allow.CheckURL(context.Background(), "http://127.0.0.2/x.png"); !errors.Is(err, ErrBlockedAddress) {
		t.Errorf("127.0.0.2 with only 127.0.0.1 allowed: %v", err)
	}
}
