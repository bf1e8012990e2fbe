// Package deps turns a function's dependency manifest (requirements.txt; package.json +
// package-lock.json) into a cached, content-addressed layer: the key is a hash of what decides the
// install's result, a Resolver installs on a miss, and a Store (the registry) keeps the layer so
// every later build with the same key mounts it instead of installing again. deps knows no
// Kubernetes: it exports the installer's argv and env for whoever runs it.
package deps
