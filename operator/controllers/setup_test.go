package controllers_test

import (
	"context"
	"strings"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sless-dev/sless/activator"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/internal/kubetest"
	"github.com/sless-dev/sless/oci"
	"github.com/sless-dev/sless/operator/controllers"
)

type noInstances struct{}

func (noInstances) Instances(context.Context, string, string) ([]activator.Instance, error) {
	return nil, nil
}

func follow(context.Context, string, string, string, func(apiv1.LogLine) error) error { return nil }

// Setup refuses a Config that lacks what it needs, saying what, and wires a whole one into a
// manager: the Scaler only with Autoscale.
func TestSetup(t *testing.T) {
	code, err := codestore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := oci.NewBuilder()
	if err != nil {
		t.Fatal(err)
	}
	pipeline, err := build.New(code, b, build.WithRegistry("127.0.0.1:1"), build.WithRuntimes(map[string]string{"python3.11": "127.0.0.1:1/rt@sha256:" + strings.Repeat("0", 64)}))
	if err != nil {
		t.Fatal(err)
	}
	whole := controllers.Config{Pipeline: pipeline, Code: code, OperatorNamespace: "sless-system", FollowPod: follow, PublicURL: "http://api.test",
		Deps: &controllers.DepsConfig{Repo: "127.0.0.1:1/sless/deps", OperatorImage: "op@sha256:" + strings.Repeat("0", 64), PushCredential: func(string) []byte { return nil }}}
	for _, tc := range []struct {
		change func(*controllers.Config)
		want   string
	}{
		{func(c *controllers.Config) { c.Pipeline = nil }, "Config.Pipeline"},
		{func(c *controllers.Config) { c.Code = nil }, "Config.Code"},
		{func(c *controllers.Config) { c.OperatorNamespace = "" }, "Config.OperatorNamespace"},
		{func(c *controllers.Config) { c.FollowPod = nil }, "Config.FollowPod"},
		{func(c *controllers.Config) { c.Autoscale = &controllers.AutoscaleConfig{LoadsService: "x"} }, "Instances"},
	} {
		cfg := whole
		tc.change(&cfg)
		if _, err := controllers.Setup(nil, cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want an error naming %s, got %v", tc.want, err)
		}
	}

	env := kubetest.Start(t)
	for _, autoscale := range []bool{false, true} {
		mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
			Controller: config.Controller{SkipNameValidation: &skipNameValidation}})
		if err != nil {
			t.Fatal(err)
		}
		cfg := whole
		if autoscale {
			cfg.Autoscale = &controllers.AutoscaleConfig{Instances: noInstances{}, LoadsService: "sless-api-loads"}
		}
		scaler, err := controllers.Setup(mgr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if (scaler != nil) != autoscale {
			t.Errorf("autoscale %v: scaler %v", autoscale, scaler)
		}
		if whole.Deps.Pins != nil {
			t.Error("Setup changed the caller's DepsConfig")
		}
	}
}
