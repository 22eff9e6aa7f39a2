// The wire types of the function protocol, generated from openapi.yaml into
// protocol.gen.ts by openapi-typescript (npm run generate; test.sh checks it is fresh).
import type { components } from "./protocol.gen.js";

type Schemas = components["schemas"];

export type InvocationRequest = Schemas["InvocationRequest"];
export type InvocationAnswer = Schemas["InvocationAnswer"];
export type JournalEntry = Schemas["JournalEntry"];
export type EntryKind = Schemas["EntryKind"];
export type Await = Schemas["Await"];
export type ErrorInfo = Schemas["ErrorInfo"];
export type CheckpointAck = Schemas["CheckpointAck"];
export type Manifest = Schemas["Manifest"];
export type ManifestFunction = Schemas["ManifestFunction"];
export type FunctionConfig = Schemas["FunctionConfig"];
export type RetryPolicy = Schemas["RetryPolicy"];
export type WireIdentity = Schemas["Identity"];
export type InvokeCall = Schemas["InvokeCall"];
export type StreamWrite = Schemas["StreamWrite"];
export type InvocationClaim = Schemas["InvocationClaim"];
export type ReplayOutcome = Schemas["ReplayOutcome"];
export type ReplayStep = Schemas["ReplayStep"];
export type Run = Schemas["Run"];
export type RunExport = Schemas["RunExport"];
