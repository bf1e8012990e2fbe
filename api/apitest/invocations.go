package apitest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
)

// GET …/invocations pages newest first with limit and a before cursor, with no gap and no repeat;
// bad parameters are 400 invalid_argument naming the parameter; a function's records are its own
// (not another function's, not another tenant's of the same name).
func testInvocationsPaging(t *testing.T, bk Backend) {
	e := NewEnv(t, bk)
	ctx := context.Background()
	e.Ensure()
	e.Function("pager")
	e.Function("other")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer up.Close()
	e.Ready("pager", up.URL)
	e.Ready("other", up.URL)
	call := func(path string) {
		t.Helper()
		resp, err := http.Get(e.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	const n = 7
	for i := range n {
		if i == 0 {
			call("/fn/" + e.NS + "/pager/fail") // the oldest
		} else {
			call("/fn/" + e.NS + "/pager/")
		}
	}
	call("/fn/" + e.NS + "/other/")

	// A record is made as its response ends: wait until all are there.
	var all []apiv1.Invocation
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var err error
		all, err = e.C.ListInvocations(ctx, "pager", 0, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if len(all) >= n || time.Now().After(deadline) {
			break
		}
	}
	if len(all) != n || all[n-1].Status != 500 || all[0].Status != 200 {
		t.Fatalf("want %d records, the oldest a 500: %+v", n, all)
	}
	for i := 1; i < n; i++ {
		if !all[i].Time.Before(all[i-1].Time) {
			t.Errorf("not newest first at %d: %v then %v", i, all[i-1].Time, all[i].Time)
		}
	}

	// Pages of 3, each before the last item of the previous one, walk the same list.
	var paged []apiv1.Invocation
	before := time.Time{}
	for range n {
		page, err := e.C.ListInvocations(ctx, "pager", 3, before)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 3 {
			t.Fatalf("limit 3 answered %d", len(page))
		}
		paged = append(paged, page...)
		if len(page) < 3 {
			break
		}
		before = page[len(page)-1].Time
	}
	if !sameInvocations(paged, all) {
		t.Errorf("pages of 3:\n%+v\nwant\n%+v", paged, all)
	}
	if one, err := e.C.ListInvocations(ctx, "pager", 1, time.Time{}); err != nil || !sameInvocations(one, all[:1]) {
		t.Errorf("limit 1: %+v %v", one, err)
	}
	if none, err := e.C.ListInvocations(ctx, "pager", 0, all[n-1].Time); err != nil || len(none) != 0 || none == nil {
		t.Errorf("before the oldest: %+v %v (want an empty list)", none, err)
	}

	// An RFC 3339 time with an offset (URL-encoded) is the same instant.
	off := all[2].Time.In(time.FixedZone("", 2*3600)).Format(time.RFC3339Nano)
	code, _, body := e.Raw("GET", "/v1/namespaces/"+e.NS+"/functions/pager/invocations?limit=1000&before="+url.QueryEscape(off), e.Token, "", nil)
	var l apiv1.List[apiv1.Invocation]
	if json.Unmarshal(body, &l); code != 200 || !sameInvocations(l.Items, all[3:]) {
		t.Errorf("before %s: %d %s", off, code, body)
	}

	for _, bad := range []struct{ query, param string }{
		{"limit=0", "limit"}, {"limit=1001", "limit"}, {"limit=ten", "limit"},
		{"before=yesterday", "before"}, {"before=2026-01-02", "before"}, {"before=1767225600", "before"},
		{"limit=5&before=2026-01-02T03:04:05", "before"},
	} {
		code, ecode, body := e.Raw("GET", "/v1/namespaces/"+e.NS+"/functions/pager/invocations?"+bad.query, e.Token, "", nil)
		if code != 400 || ecode != apiv1.CodeInvalidArgument || !strings.Contains(string(body), bad.param) {
			t.Errorf("?%s: %d %s %s (want 400 invalid_argument naming %s)", bad.query, code, ecode, body, bad.param)
		}
	}

	if l, err := e.C.Invocations(ctx, "other"); err != nil || len(l) != 1 {
		t.Errorf("the other function: %+v %v", l, err)
	}
	o := e.Tenant()
	o.Ensure()
	o.Function("pager")
	if l, err := o.C.Invocations(ctx, "pager"); err != nil || len(l) != 0 {
		t.Errorf("another tenant's function of the same name: %+v %v", l, err)
	}
}

// sameInvocations compares by instant, not by time zone or monotonic reading.
func sameInvocations(a, b []apiv1.Invocation) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Time.Equal(b[i].Time) || a[i].Status != b[i].Status || a[i].RequestID != b[i].RequestID || a[i].DurationMS != b[i].DurationMS {
			return false
		}
	}
	return true
}
