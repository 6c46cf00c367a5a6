// The h2spec HTTP/2 conformance suite run by the scenarios, built by
// build.sh into a cache outside the tree. h2spec has no go.mod of its own,
// so every dependency is pinned here; a module of its own so that the main
// module never depends on it.
module github.com/teapot-lb/teapot-lb/scenarios/h2spectool

go 1.26.0

require (
	github.com/fatih/color v1.13.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/mattn/go-colorable v0.1.9 // indirect
	github.com/mattn/go-isatty v0.0.14 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	github.com/summerwind/h2spec v2.2.1+incompatible // indirect
	golang.org/x/net v0.59.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)

tool github.com/summerwind/h2spec/cmd/h2spec
