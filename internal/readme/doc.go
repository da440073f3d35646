// Package readme holds the check that the README's Go snippets are code
// that compiles and passes vet: each is the body of an example function in
// a _test.go file of the package it uses (readme_example_test.go), which
// go test compiles and go vet checks.
package readme
