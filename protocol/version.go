package protocol

// Version is the function protocol's version that this gateway speaks, a semantic
// version: a gateway serves every SDK whose protocol version has the same major
// version and a minor version no greater than this one's.
const Version = "1.0.0"
