package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gorilla/mux"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/auth"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/objects"
)

// The OpenAPI document is checked here as a document: it is what the server serves, it is valid
// OpenAPI 3.1, it lists exactly the server's routes, and its error codes have errors.go's statuses.
// That every exchange of the route tests matches it is api/apitest's check (openapi.go).

// routesOnlyServer is a Server whose stores are never called: enough to walk its router and serve
// the routes that need no store.
func routesOnlyServer(t *testing.T) *Server {
	t.Helper()
	v, err := auth.New(auth.WithHS256Secret([]byte("0123456789abcdef0123456789abcdef")))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(objects.Backend{
		Namespaces: struct{ objects.Namespaces }{},
		Functions: struct {
			objects.Store[objects.FunctionSpec, lifecycle.FunctionStatus]
		}{},
		Triggers: struct {
			objects.Store[objects.TriggerSpec, apiv1.TriggerStatus]
		}{},
		Jobs: struct {
			objects.Store[objects.JobSpec, apiv1.JobStatus]
		}{},
		Secrets:     struct{ objects.Secrets }{},
		Invocations: objects.NewInvocationRing(1),
		Code:        struct{ codestore.Store }{},
		Resolver:    struct{ objects.Resolver }{},
	}, WithVerifier(v))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestOpenAPIServedIsCommitted(t *testing.T) {
	committed, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(routesOnlyServer(t).Handler())
	defer hs.Close()
	resp, err := http.Get(hs.URL + "/openapi.json") // no token
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	served, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /openapi.json: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !bytes.Equal(served, committed) {
		t.Errorf("GET /openapi.json serves %d bytes that differ from api/openapi.json (%d bytes)", len(served), len(committed))
	}
}

func TestOpenAPIDocumentIsValid31(t *testing.T) {
	doc, err := libopenapi.NewDocument(OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	if v := doc.GetVersion(); !strings.HasPrefix(v, "3.1.") {
		t.Errorf("openapi %q, want 3.1.x", v)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatalf("libopenapi builds the model with errors: %v", err)
	}
	if m.Model.Paths == nil || m.Model.Paths.PathItems.Len() == 0 {
		t.Fatal("no paths")
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("not valid against the OpenAPI 3.1 schema: %s: %s", e.Message, e.Reason)
			for _, f := range e.SchemaValidationErrors {
				t.Errorf("    %s (at %s)", f.Reason, f.FieldPath)
			}
		}
	}
}

// openAPIJSON is the document as plain JSON, for walking it.
type openAPIJSON struct {
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Responses map[string]struct {
			Content map[string]struct {
				Schema struct {
					AllOf []struct {
						Properties struct {
							Error struct {
								Properties struct {
									Code struct {
										Const string   `json:"const"`
										Enum  []string `json:"enum"`
									} `json:"code"`
								} `json:"properties"`
							} `json:"error"`
						} `json:"properties"`
					} `json:"allOf"`
				} `json:"schema"`
			} `json:"content"`
		} `json:"responses"`
		Schemas struct {
			ErrorCode struct {
				Enum []string `json:"enum"`
			} `json:"ErrorCode"`
		} `json:"schemas"`
	} `json:"components"`
}

var openAPIMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

func readOpenAPIJSON(t *testing.T) openAPIJSON {
	t.Helper()
	var d openAPIJSON
	if err := json.Unmarshal(OpenAPI(), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// Every route of the router is an operation of the document and every operation a route; /fn/
// (dispatched before the router) has every method OpenAPI can name, at its root and below it.
func TestOpenAPIListsEveryRoute(t *testing.T) {
	var routes []string
	err := routesOnlyServer(t).router.Walk(func(r *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tpl, err := r.GetPathTemplate()
		if err != nil {
			return err
		}
		methods, err := r.GetMethods()
		if err != nil {
			return nil // a subrouter's prefix
		}
		for _, m := range methods {
			routes = append(routes, strings.ToLower(m)+" "+tpl)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/fn/{ns}/{name}", "/fn/{ns}/{name}/{path}"} {
		for _, m := range openAPIMethods {
			routes = append(routes, m+" "+p)
		}
	}
	var ops []string
	for p, item := range readOpenAPIJSON(t).Paths {
		for m := range item {
			if slices.Contains(openAPIMethods, m) {
				ops = append(ops, m+" "+p)
			}
		}
	}
	sort.Strings(routes)
	sort.Strings(ops)
	for _, r := range routes {
		if !slices.Contains(ops, r) {
			t.Errorf("the router serves %s; api/openapi.json does not list it", r)
		}
	}
	for _, o := range ops {
		if !slices.Contains(routes, o) {
			t.Errorf("api/openapi.json lists %s; the router does not serve it", o)
		}
	}
}

// Each error response of the document names codes whose status (apiv1.StatusOf) is the one it is
// listed under, and the document knows every code errors.go defines.
func TestOpenAPIErrorCodesHaveTheirStatus(t *testing.T) {
	d := readOpenAPIJSON(t)
	codes := []string{apiv1.CodeUnauthenticated, apiv1.CodeNotFound, apiv1.CodeAlreadyExists, apiv1.CodeConflict,
		apiv1.CodeInvalidArgument, apiv1.CodeInvalidArchive, apiv1.CodePayloadTooLarge, apiv1.CodeNotReady,
		apiv1.CodeUpstreamError, apiv1.CodeUpstreamTimeout, apiv1.CodeInternal, apiv1.CodeThrottled, apiv1.CodeQuotaExceeded,
		codeMethodNotAllowed}
	for _, c := range codes {
		if !slices.Contains(d.Components.Schemas.ErrorCode.Enum, c) {
			t.Errorf("error code %q is not in components.schemas.ErrorCode", c)
		}
	}
	statusOf := func(code string) string {
		if code == codeMethodNotAllowed {
			return "405" // written by the router's MethodNotAllowedHandler; apiv1.StatusOf does not know it
		}
		return strconv.Itoa(apiv1.StatusOf(code))
	}
	checked := 0
	for p, item := range d.Paths {
		for m, raw := range item {
			if !slices.Contains(openAPIMethods, m) {
				continue
			}
			var op struct {
				Responses map[string]struct {
					Ref string `json:"$ref"`
				} `json:"responses"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", m, p, err)
			}
			for status, r := range op.Responses {
				name, ok := strings.CutPrefix(r.Ref, "#/components/responses/")
				if !ok {
					continue
				}
				resp, ok := d.Components.Responses[name]
				if !ok {
					t.Errorf("%s %s %s: no components.responses.%s", m, p, status, name)
					continue
				}
				all := resp.Content["application/json"].Schema.AllOf
				if len(all) != 2 {
					t.Errorf("components.responses.%s: want allOf [Error, its codes]", name)
					continue
				}
				c := all[1].Properties.Error.Properties.Code
				for _, code := range append(c.Enum, c.Const) {
					if code == "" {
						continue
					}
					checked++
					if got := statusOf(code); got != status {
						t.Errorf("%s %s lists %q under %s; the API sends it with %s", m, p, code, status, got)
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Error("no error response checked")
	}
}

// codeMethodNotAllowed is the code server.go's MethodNotAllowedHandler writes.
const codeMethodNotAllowed = "method_not_allowed"

// The reasons of events and conditions are the document's Stage enum, exactly: every reason the
// platform writes (apiv1.Reasons, the only ones package lifecycle and the build pipeline use) is
// documented, and the document names none the platform never writes.
func TestOpenAPIStagesAreTheReasons(t *testing.T) {
	var d struct {
		Components struct {
			Schemas struct {
				Stage struct {
					Enum []string `json:"enum"`
				} `json:"Stage"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPI(), &d); err != nil {
		t.Fatal(err)
	}
	got, want := slices.Sorted(slices.Values(d.Components.Schemas.Stage.Enum)), slices.Sorted(slices.Values(apiv1.Reasons))
	if !slices.Equal(got, want) {
		t.Errorf("components.schemas.Stage is %v; the platform's reasons are %v", got, want)
	}
}
