// Package ports picks loopback ports at run time.
package ports
