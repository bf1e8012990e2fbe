package api

import (
	"bytes"
	_ "embed"
	"net/http"
	"strconv"
)

// openAPIDocument is the OpenAPI 3.1 document of every route (routes and /fn/), kept by hand next
// to the code it describes. The route tests (api/apitest) validate every request they send and every
// answer they get against it, so it cannot drift from the handlers unnoticed.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPI returns the OpenAPI 3.1 document of the API (JSON), as GET /openapi.json serves it.
func OpenAPI() []byte { return bytes.Clone(openAPIDocument) }

// serveOpenAPI answers GET /openapi.json, without authentication: the document holds no secrets.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(openAPIDocument)))
	h.Set("Cache-Control", "public, max-age=300")
	w.WriteHeader(http.StatusOK)
	w.Write(openAPIDocument)
}
