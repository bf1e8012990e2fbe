package controllers

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sless-dev/sless/lifecycle"
)

// An error (a conflict at a cold start, a cache a moment behind) is retried within milliseconds,
// growing to at most lifecycle.RetryMax; a failed build's spacing is the status's (faults_test).
func TestRateLimiterRetriesAtOnce(t *testing.T) {
	l := rateLimiter()
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "f"}}
	if d := l.When(req); d > 50*time.Millisecond {
		t.Errorf("first retry after %v, want milliseconds", d)
	}
	var d time.Duration
	for range 30 {
		d = l.When(req)
	}
	if d != lifecycle.RetryMax {
		t.Errorf("after 30 failures the retry waits %v, want lifecycle.RetryMax %v", d, lifecycle.RetryMax)
	}
}
