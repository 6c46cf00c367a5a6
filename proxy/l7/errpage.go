package l7

import (
	"net/http"
	"strconv"
)

// errorPage is a pre-rendered HTTP/1.1 error response.
type errorPage struct {
	keep, close []byte // with and without keep-alive
	bodyLen     int
	html        []byte
}

var errorText = map[int]string{
	400: "The request was malformed and cannot be served.",
	404: "No route matches this host and path.",
	405: "This method is not served here.",
	408: "The request took too long to arrive.",
	413: "The request body is larger than this service accepts.",
	425: "The request arrived in TLS early data, which can be replayed; send it again now that the handshake is complete.",
	431: "The request header fields are too large or too many.",
	500: "The request could not be served.",
	502: "The service behind this address did not answer properly.",
	503: "No server is available to serve this request.",
	504: "The service behind this address did not answer in time.",
	505: "This HTTP version is not supported.",
}

var errorPages = func() map[int]*errorPage {
	m := make(map[int]*errorPage, len(errorText))
	for code, text := range errorText {
		reason := http.StatusText(code)
		html := []byte("<!DOCTYPE html>\n<html><head><title>" + strconv.Itoa(code) + " " + reason +
			"</title></head><body><h1>" + strconv.Itoa(code) + " " + reason + "</h1><p>" + text + "</p></body></html>\n")
		head := "HTTP/1.1 " + strconv.Itoa(code) + " " + reason + "\r\n" +
			"Content-Type: text/html; charset=utf-8\r\n" +
			"Cache-Control: no-cache\r\n" +
			"Content-Length: " + strconv.Itoa(len(html)) + "\r\n"
		p := &errorPage{bodyLen: len(html), html: html}
		p.keep = append([]byte(head+"\r\n"), html...)
		p.close = append([]byte(head+"Connection: close\r\n\r\n"), html...)
		m[code] = p
	}
	return m
}()

// pageFor returns the error page of a status, 500's for an unknown one.
func pageFor(code int) *errorPage {
	if p := errorPages[code]; p != nil {
		return p
	}
	return errorPages[500]
}

// closesConn reports whether a locally generated status ends the
// connection: the request could not be read to its end.
func closesConn(code int) bool {
	switch code {
	case 400, 405, 408, 413, 431, 505:
		return true
	}
	return false
}

// writeErrorPage writes an error page to an http.ResponseWriter (HTTP/2
// clients and local bridges).
func writeErrorPage(w http.ResponseWriter, code int) {
	p := pageFor(code)
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Length", strconv.Itoa(p.bodyLen))
	w.WriteHeader(code)
	_, _ = w.Write(p.html)
}
