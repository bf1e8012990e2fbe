// Package lifecycletest checks that a backend moved a function's status through package
// lifecycle: given the kind of transition a backend's test made happen, Wrote says whether the
// status the backend wrote is what lifecycle.Next writes for it. The backends' tests (local,
// operator/controllers) call it on what they read back; lifecycle's table test calls it on every
// case, so the two check the same transitions.
package lifecycletest
