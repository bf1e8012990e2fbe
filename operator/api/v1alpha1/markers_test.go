package v1alpha1_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/sless-dev/sless/api/apiv1"
)

// The CRD markers restate apiv1's rules (the one source of each): this test reads the generated
// CRDs and fails when a marker and the rule it restates disagree.
func TestMarkersAgreeWithAPIv1(t *testing.T) {
	fn := specOf(t, "sless.dev_functions.yaml")
	str := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	num := func(n int) string { return strconv.Itoa(n) }
	check := func(what string, got any, want any) {
		t.Helper()
		if g, w := jsonOf(got), jsonOf(want); g != w {
			t.Errorf("%s: CRD has %s, apiv1 says %s", what, g, w)
		}
	}
	runtime := fn.Properties["runtime"]
	var enum []string
	for _, e := range runtime.Enum {
		var s string
		json.Unmarshal(e.Raw, &s)
		enum = append(enum, s)
	}
	slices.Sort(enum)
	check("functions spec.runtime enum", enum, apiv1.Runtimes())
	ep := fn.Properties["entrypoint"]
	check("functions spec.entrypoint pattern", ep.Pattern, apiv1.EntrypointPattern)
	check("functions spec.entrypoint maxLength", ep.MaxLength, apiv1.MaxEntrypointLength)
	check("functions spec.entrypoint default", string(ep.Default.Raw), str(apiv1.DefaultEntrypoint))
	mem := fn.Properties["memoryMB"]
	check("functions spec.memoryMB minimum", mem.Minimum, apiv1.MinMemoryMB)
	check("functions spec.memoryMB maximum", mem.Maximum, apiv1.MaxMemoryMB)
	check("functions spec.memoryMB default", string(mem.Default.Raw), num(apiv1.DefaultMemoryMB))
	to := fn.Properties["timeoutSec"]
	check("functions spec.timeoutSec minimum", to.Minimum, apiv1.MinTimeoutSec)
	check("functions spec.timeoutSec maximum", to.Maximum, apiv1.MaxTimeoutSec)
	check("functions spec.timeoutSec default", string(to.Default.Raw), num(apiv1.DefaultTimeoutSec))
	check("functions spec.env maxItems", fn.Properties["env"].MaxItems, apiv1.MaxEnvVars)
	minR, maxR := fn.Properties["minReplicas"], fn.Properties["maxReplicas"]
	check("functions spec.minReplicas minimum", minR.Minimum, 0)
	check("functions spec.minReplicas maximum", minR.Maximum, apiv1.MaxReplicasLimit)
	check("functions spec.minReplicas default", string(minR.Default.Raw), num(apiv1.DefaultMinReplicas))
	check("functions spec.maxReplicas minimum", maxR.Minimum, 1)
	check("functions spec.maxReplicas maximum", maxR.Maximum, apiv1.MaxReplicasLimit)
	conc, idle := fn.Properties["concurrency"], fn.Properties["idleTimeoutSec"]
	check("functions spec.concurrency minimum", conc.Minimum, apiv1.MinConcurrency)
	check("functions spec.concurrency maximum", conc.Maximum, apiv1.MaxConcurrency)
	check("functions spec.concurrency default", string(conc.Default.Raw), num(apiv1.DefaultConcurrency))
	check("functions spec.idleTimeoutSec minimum", idle.Minimum, apiv1.MinIdleTimeoutSec)
	check("functions spec.idleTimeoutSec maximum", idle.Maximum, apiv1.MaxIdleTimeoutSec)
	check("functions spec.idleTimeoutSec default", string(idle.Default.Raw), num(apiv1.DefaultIdleTimeout))

	tr := specOf(t, "sless.dev_triggers.yaml")
	check("triggers spec.functionRef pattern", tr.Properties["functionRef"].Pattern, apiv1.NamePattern)
	check("triggers spec.functionRef maxLength", tr.Properties["functionRef"].MaxLength, apiv1.MaxNameLength)
	var types []string
	for _, e := range tr.Properties["type"].Enum {
		var s string
		json.Unmarshal(e.Raw, &s)
		types = append(types, s)
	}
	check("triggers spec.type enum", types, []apiv1.TriggerType{apiv1.TriggerHTTP, apiv1.TriggerCron, apiv1.TriggerRabbitMQ})
	mq := tr.Properties["rabbitmq"]
	check("triggers spec.rabbitmq.prefetch maximum", mq.Properties["prefetch"].Maximum, apiv1.MaxPrefetch)
	check("triggers spec.rabbitmq.maxRetries maximum", mq.Properties["maxRetries"].Maximum, apiv1.MaxMaxRetries)
	check("triggers spec.rabbitmq.retryBackoffMS maximum", mq.Properties["retryBackoffMS"].Maximum, apiv1.MaxRetryBackoffMS)

	job := specOf(t, "sless.dev_functionjobs.yaml")
	check("functionjobs spec.functionRef pattern", job.Properties["functionRef"].Pattern, apiv1.NamePattern)
	check("functionjobs spec.functionRef maxLength", job.Properties["functionRef"].MaxLength, apiv1.MaxNameLength)
	check("functionjobs spec.eventJSON maxLength", job.Properties["eventJSON"].MaxLength, apiv1.MaxEventJSONBytes)
}

func jsonOf(v any) string {
	switch x := v.(type) {
	case *int64:
		if x == nil {
			return "null"
		}
		return strconv.FormatInt(*x, 10)
	case *float64:
		if x == nil {
			return "null"
		}
		return strconv.FormatFloat(*x, 'f', -1, 64)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// specOf is the OpenAPI schema of spec in the generated CRD file.
func specOf(t *testing.T, file string) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", file))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
}
