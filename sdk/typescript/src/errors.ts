/** Error types of a step's final failure, in StepError.type and in the journal. */
export const ErrorType = {
  /** The last attempt failed. */
  failed: "step_failed",
  /** An attempt failed with a NonRetryableError. */
  nonRetryable: "non_retryable",
  /** An invoked function is not registered in the run's tenant. */
  notFound: "not_found",
  /** An invoked function's invoke_roles exclude the run's identity; for send, the target's and its resume_roles. */
  forbidden: "forbidden",
  /** A callback was rejected. */
  rejected: "rejected",
  /** A wait's timeout passed (TimedOutError). */
  timedOut: "timed_out",
} as const;

/**
 * A permanent failure. Thrown by a step's function, it fails the step at once, whatever
 * attempts are left; thrown by a function, it fails the run without retries.
 */
export class NonRetryableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "NonRetryableError";
  }
}

/**
 * The final failure of a step (its last attempt failed, or it threw a NonRetryableError),
 * of a child run (step.invoke), of a rejected callback or of a message that could not be
 * sent. A replay throws the same StepError from the journal, so only its fields survive:
 * branch on `type` or `message`, not on the class of the original error. Thrown out of a
 * function, it fails the run.
 */
export class StepError extends Error {
  constructor(
    /** The step's seq in the run. */
    readonly seq: number,
    /** The step's name. */
    readonly stepName: string,
    /** ErrorType.failed or ErrorType.nonRetryable, or what the journal holds. */
    readonly type: string,
    message: string,
  ) {
    super(message);
    this.name = "StepError";
  }
}

/**
 * A wait whose timeout passed before what it waited for came: an event, a message, a
 * callback's resolution (Go's step.ErrTimedOut). The timeout is journaled, so a replay
 * throws it again. A StepError of type "timed_out": let out of a function, it fails the
 * run.
 */
export class TimedOutError extends StepError {
  constructor(seq: number, stepName: string) {
    super(seq, stepName, ErrorType.timedOut, `step ${seq} ${JSON.stringify(stepName)}: timed out`);
    this.name = "TimedOutError";
  }
}

/** A run's input that its function's schema refuses: the run fails (type "input"). */
export class InputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "InputError";
  }
}

/** The message of anything thrown. */
export function messageOf(e: unknown): string {
  if (e instanceof Error) return e.message;
  return String(e);
}
