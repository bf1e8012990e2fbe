// Command smoke is hack/k8s/smoke.sh's workload: a static binary on an otherwise empty image, so the
// check needs no base image from Docker Hub.
//
//	smoke                 serve "hello from HOSTNAME" on :8080 (the Deployment)
//	smoke get URL...      GET each URL, retrying for up to 20 s (the Job: cluster DNS, Service
//	                      routing and pod networking from inside a pod); exit 1 if one never answers 200
package main
