package main_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sless-dev/sless/api/apitest"
	"github.com/sless-dev/sless/internal/testenv"
)

// scrape GETs /metrics from addr, sending token as a bearer token unless it is empty.
func scrape(t *testing.T, addr, token string) (int, string) {
	t.Helper()
	code, _, body := testenv.AuthGet(t, "http://"+addr+"/metrics", token)
	return code, body
}

// metricsHave says whether addr's /metrics (scraped with token) answers 200 with want in it.
func metricsHave(t *testing.T, addr, token, want string) bool {
	t.Helper()
	code, body := scrape(t, addr, token)
	return code == http.StatusOK && strings.Contains(body, want)
}

// checkMetricsListeners: a process's public listener answers 404 for /metrics with no token, a
// tenant's JWT and an "admin" JWT (tokens valid for secret); its metrics listener (withToken,
// started with --metrics-token-file holding scrapeToken) answers 401 without the scrape token,
// with a wrong one and with either JWT, and serves the series with it; open, a metrics listener
// without a token file, serves them to whoever reaches it.
func checkMetricsListeners(t *testing.T, secret []byte, tenantToken, scrapeToken, public, withToken, open string) {
	t.Helper()
	admin := apitest.AdminToken(t, secret)
	for who, tok := range map[string]string{"no token": "", "the tenant's JWT": tenantToken, "an admin JWT": admin, "the scrape token": scrapeToken} {
		if code, body := scrape(t, public, tok); code != http.StatusNotFound || strings.Contains(body, "sless_") {
			t.Errorf("%s's /metrics with %s: %d %.200s, want 404", public, who, code, body)
		}
	}
	for who, tok := range map[string]string{"no token": "", "a wrong token": scrapeToken + "x", "the tenant's JWT": tenantToken, "an admin JWT": admin} {
		if code, body := scrape(t, withToken, tok); code != http.StatusUnauthorized || strings.Contains(body, "sless_") {
			t.Errorf("the metrics listener %s with %s: %d %.200s, want 401", withToken, who, code, body)
		}
	}
	if !metricsHave(t, withToken, scrapeToken, "sless_") {
		t.Errorf("the metrics listener %s refuses the scrape token", withToken)
	}
	if !metricsHave(t, open, "", "sless_") {
		t.Errorf("the metrics listener %s without a token file refuses a scrape", open)
	}
}
