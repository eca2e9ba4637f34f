package mocker

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
)

func base64Std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func httpPost(url string, body []byte) (string, error) {
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
