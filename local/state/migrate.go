package state

import (
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/objects"
)

// migrate moves records of schema 1 (an earlier sless up: each object one apiv1 JSON value, the
// uploaded code's hash in its status) to spec and status. An object whose status was final
// (Ready, Failed, a finished run) counts as observed; one that was still on its way shows Pending
// until the controller has acted on it.
func migrate(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	if string(meta.Get([]byte("schema"))) == schemaVersion {
		return nil
	}
	if err := migrateBucket(tx.Bucket(bucketFunctions), func(v []byte) (any, error) {
		var old apiv1.Function
		if err := json.Unmarshal(v, &old); err != nil {
			return nil, err
		}
		st := old.Status
		r := record[objects.FunctionSpec, lifecycle.FunctionStatus]{Spec: objects.FunctionSpec{Name: old.Name, Runtime: old.Runtime, Entrypoint: old.Entrypoint,
			MemoryMB: old.MemoryMB, TimeoutSec: old.TimeoutSec, EnvVars: old.EnvVars, CodeSHA256: st.CodeSHA256}, Generation: 1}
		st.CodeSHA256, st.URL = "", ""
		r.Status.FunctionStatus = st
		if st.Phase == apiv1.PhaseReady || st.Phase == apiv1.PhaseFailed {
			r.ObservedGeneration = 1
		}
		return r, nil
	}); err != nil {
		return fmt.Errorf("migrating functions: %w", err)
	}
	if err := migrateBucket(tx.Bucket(bucketTriggers), func(v []byte) (any, error) {
		var old apiv1.Trigger
		if err := json.Unmarshal(v, &old); err != nil {
			return nil, err
		}
		st := old.Status
		st.URL = ""
		return record[objects.TriggerSpec, apiv1.TriggerStatus]{Spec: objects.TriggerSpec{Name: old.Name, Type: old.Type, FunctionRef: old.FunctionRef,
			Schedule: old.Schedule, Enabled: old.Enabled}, Generation: 1, Status: st, ObservedGeneration: 1}, nil
	}); err != nil {
		return fmt.Errorf("migrating triggers: %w", err)
	}
	if err := migrateBucket(tx.Bucket(bucketJobs), func(v []byte) (any, error) {
		var old apiv1.Job
		if err := json.Unmarshal(v, &old); err != nil {
			return nil, err
		}
		r := record[objects.JobSpec, apiv1.JobStatus]{Spec: objects.JobSpec{Name: old.Name, FunctionRef: old.FunctionRef, EventJSON: old.EventJSON,
			RunID: old.RunID}, Generation: 1, Status: old.Status}
		if old.RunID == 0 || old.Status.LastRunID >= old.RunID {
			r.ObservedGeneration = 1
		}
		return r, nil
	}); err != nil {
		return fmt.Errorf("migrating jobs: %w", err)
	}
	if err := migrateBucket(tx.Bucket(bucketBuilds), func(v []byte) (any, error) {
		var old struct {
			CodeSHA256 string   `json:"code_sha256"`
			Runtime    string   `json:"runtime"`
			Entrypoint string   `json:"entrypoint"`
			RuntimeRef string   `json:"runtime_ref"`
			Image      string   `json:"image"`
			FailedKey  string   `json:"failed_key"`
			Images     []string `json:"images"`
		}
		if err := json.Unmarshal(v, &old); err != nil {
			return nil, err
		}
		b := Build{Image: old.Image, Images: old.Images, LegacyFailed: old.FailedKey}
		if old.Image != "" {
			b.Legacy = LegacyKey(old.CodeSHA256, old.Runtime, old.Entrypoint, old.RuntimeRef)
		}
		return b, nil
	}); err != nil {
		return fmt.Errorf("migrating builds: %w", err)
	}
	return meta.Put([]byte("schema"), []byte(schemaVersion))
}

// LegacyKey is the build identity schema 1 kept: code|runtime|entrypoint|runtime image.
func LegacyKey(code, runtime, entrypoint, runtimeImage string) string {
	return code + "|" + runtime + "|" + entrypoint + "|" + runtimeImage
}

// migrateBucket rewrites every value that is not already a schema 2 record (one with a "spec", or,
// for builds, written after the migration) with conv.
func migrateBucket(b *bolt.Bucket, conv func([]byte) (any, error)) error {
	type kv struct{ k, v []byte }
	var todo []kv
	err := b.ForEach(func(k, v []byte) error {
		var probe map[string]json.RawMessage
		if err := json.Unmarshal(v, &probe); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		if _, ok := probe["spec"]; ok {
			return nil
		}
		if _, ok := probe["key"]; ok {
			return nil
		}
		todo = append(todo, kv{append([]byte(nil), k...), append([]byte(nil), v...)})
		return nil
	})
	if err != nil {
		return err
	}
	for _, e := range todo {
		nv, err := conv(e.v)
		if err != nil {
			return fmt.Errorf("%s: %w", e.k, err)
		}
		if err := put(b, e.k, nv); err != nil {
			return err
		}
	}
	return nil
}
