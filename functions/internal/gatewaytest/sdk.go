package gatewaytest

// SDK is the name and version that the Go SDK's manifest says ("sdk"): stepgate-go/ and
// stepgate's release version. The SDK's tests compare its manifest with it; the server's
// module, which holds the release version (internal/helpers/version), checks that
// the manifest says that version (internal/tooling/sdkmodules). Bump it with the release.
const SDK = "stepgate-go/0.1.0"
