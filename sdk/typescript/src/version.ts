/** This SDK's version (the npm package's). */
export const SDK_VERSION = "0.1.0";

/** The function protocol's version that this SDK speaks (a semantic version). */
export const PROTOCOL_VERSION = "1.0.0";
