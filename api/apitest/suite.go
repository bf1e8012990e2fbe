package apitest

import "testing"

// Run runs the whole suite on b, each test as a subtest.
func Run(t *testing.T, b Backend) {
	seen := OpenAPIStats(b.Name).snapshot()
	t.Cleanup(func() { t.Logf("OpenAPI document (%s): %s", b.Name, OpenAPIStats(b.Name).since(seen)) })
	for _, tc := range []struct {
		name string
		test func(*testing.T, Backend)
	}{
		{"RoutesHappyPath", testRoutesHappyPath},
		{"CreateConflictsAndMissing", testCreateConflictsAndMissing},
		{"TokensRefused", testTokensRefused},
		{"InvalidSpecs", testInvalidSpecs},
		{"BadUploads", testBadUploads},
		{"ProvidedUploads", testProvidedUploads},
		{"GenerationsAndStatus", testGenerationsAndStatus},
		{"ProxyHeadersAndPaths", testProxyHeadersAndPaths},
		{"ProxyErrors", testProxyErrors},
		{"ProxyTriggerRule", testProxyTriggerRule},
		{"ProxyStreams", testProxyStreams},
		{"ProxyConfinesResponses", testProxyConfinesResponses},
		{"ProxyEventHeaders", testProxyEventHeaders},
		{"ProxyEventToken", testProxyEventToken},
		{"RabbitMQTriggerSpec", testRabbitMQTriggerSpec},
		{"AsyncInvocation", testAsyncInvocation},
		{"DeliveryReport", testDeliveryReport},
		{"AsyncNeedsAQueue", testAsyncNeedsAQueue},
		{"FunctionHosts", testFunctionHosts},
		{"UploadThrottle", testUploadThrottle},
		{"RebuildThrottle", testRebuildThrottle},
		{"ScaleFields", testScaleFields},
		{"ConcurrencyAndHolding", testConcurrencyAndHolding},
		{"FunctionMetrics", testFunctionMetrics},
		{"MetricsNotPublic", testMetricsNotPublic},
		{"ErrorEnvelopeEverywhere", testErrorEnvelopeEverywhere},
		{"FunctionQuota", testFunctionQuota},
		{"InvocationsPaging", testInvocationsPaging},
		{"Logs", testLogs},
		{"LogsFollow", testLogsFollow},
		{"LogReadsBounded", testLogReadsBounded},
		{"BuildLogAndEvents", testBuildLogAndEvents},
		{"Secrets", testSecrets},
		{"Runtimes", testRuntimes},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, b) })
	}
}
