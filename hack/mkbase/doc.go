// Command mkbase turns a root filesystem directory into a one-layer OCI image layout. hack/ scripts
// use it to make base images from Debian packages, since Docker Hub is out of reach here. It tars
// the tree with GNU tar (which already handles hardlinks, xattrs and special files correctly) and
// wraps that tar as a layer.
package main
