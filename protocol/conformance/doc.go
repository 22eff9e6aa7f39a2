// Package conformance is the function protocol's conformance suite for waits: scenario
// files (scenarios/*.json, embedded) that say what a function answers on the wire, what
// is delivered to its run (events, messages, requests, callback resolutions, time), and
// what its run's journal holds at the end. The gateway is the reference: every scenario
// passes against a real gateway (internal/sdke2e/gatewayrun, in the server's module),
// and the SDKs' test harnesses run the same files (functions/functionstest, the TypeScript SDK's
// @stepgate/sdk/testing), so that what they model of the gateway's waits is checked
// against it. See README.md for the format, written for the authors of SDKs in other
// languages, who may run the files against their own harness.
//
// A runner in Go: Load the scenarios, serve each one's NewFunction where the gateway (or
// harness) invokes functions, start a run of Scenario.Start, apply the Deliveries in
// order (waiting for each to come to rest), then Scenario.Check the outcome. This
// package imports the standard library and protocol only, so that the SDK may import it.
package conformance
