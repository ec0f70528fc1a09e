/** The API's errors: RFC 9457 problem details (`application/problem+json`), as one Error class. */

import { isObject } from "../lib/json";

export interface ValidationIssue {
  loc: (string | number)[];
  msg: string;
  type?: string;
}

export interface ProblemBody {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  instance?: string;
  reason?: string | null;
  errors?: ValidationIssue[] | null;
  [member: string]: unknown;
}

/** A refused request: its HTTP status, the problem body, and the seconds `Retry-After` asks to wait (429, 503). */
export class ApiError extends Error {
  readonly status: number;
  readonly problem: ProblemBody;
  readonly retryAfter: number | null;

  constructor(status: number, problem: ProblemBody, retryAfter: number | null = null) {
    super(describeProblem(status, problem, retryAfter));
    this.name = "ApiError";
    this.status = status;
    this.problem = problem;
    this.retryAfter = retryAfter;
  }

  /** The problem's `reason` slug (a refused upload's, a quota's, a missing report's), if any. */
  get reason(): string | null {
    return typeof this.problem.reason === "string" ? this.problem.reason : null;
  }
}

function where(loc: (string | number)[]): string {
  const path = loc[0] === "body" || loc[0] === "query" || loc[0] === "path" ? loc.slice(1) : loc;
  return path.map(String).join(".");
}

/** The problem in words: its detail (or the validation issues of a 422), then when to retry. */
export function describeProblem(status: number, problem: ProblemBody, retryAfter: number | null = null): string {
  let text = typeof problem.detail === "string" && problem.detail ? problem.detail : "";
  if (Array.isArray(problem.errors) && problem.errors.length > 0) {
    const issues = problem.errors.map((e) => (where(e.loc) ? `${where(e.loc)}: ${e.msg}` : e.msg)).join("; ");
    text = text && !text.includes(issues) ? `${text} (${issues})` : issues;
  }
  if (!text) text = problem.title ? `${problem.title} (HTTP ${status})` : `The request failed (HTTP ${status}).`;
  if (retryAfter !== null) text = `${/[.!?]$/.test(text) ? text : `${text}.`} Try again in ${retryAfter} s.`;
  return text;
}

/** Seconds from a `Retry-After` header (delta-seconds or an HTTP date), or null. */
export function parseRetryAfter(header: string | null): number | null {
  if (!header) return null;
  const seconds = Number(header);
  if (Number.isFinite(seconds)) return Math.max(0, Math.ceil(seconds));
  const at = Date.parse(header);
  return Number.isNaN(at) ? null : Math.max(0, Math.ceil((at - Date.now()) / 1000));
}

/** The ApiError of a failed response whose body was already read (`body`: parsed JSON or text). */
export function problemOf(status: number, body: unknown, retryAfterHeader: string | null): ApiError {
  let problem: ProblemBody;
  if (isObject(body)) {
    problem = body;
  } else if (typeof body === "string" && body.trim()) {
    try {
      const parsed: unknown = JSON.parse(body);
      problem = isObject(parsed) ? parsed : { detail: body.slice(0, 500) };
    } catch {
      problem = { detail: body.slice(0, 500) };
    }
  } else {
    problem = {};
  }
  return new ApiError(status, problem, parseRetryAfter(retryAfterHeader));
}

/** The ApiError of a failed fetch Response (reads its body). */
export async function problemFrom(response: Response): Promise<ApiError> {
  let text = "";
  try {
    text = await response.text();
  } catch {
    // a body that cannot be read: the status alone
  }
  return problemOf(response.status, text, response.headers.get("Retry-After"));
}

/** Any caught error as a sentence for the reader. */
export function errorMessage(error: unknown): string {
  if (error instanceof ApiError) return error.message;
  if (error instanceof TypeError) return "The service did not answer (network error). Check the connection and try again.";
  if (error instanceof Error) return error.message;
  return String(error);
}

/** Whether `error` is the API answering `status`. */
export function isStatus(error: unknown, status: number): boolean {
  return error instanceof ApiError && error.status === status;
}

const REASONS: Record<string, string> = {
  "zip-bomb": "the archive expands to far more than its size (it looks like a zip bomb)",
  "path-traversal": "an archive member's path points outside the archive",
  symlink: "the archive holds a symbolic link",
  "too-few-classes": "the dataset needs at least two classes",
  "too-few-samples": "a class has too few samples",
  "too-many-classes": "the dataset has more classes than the service takes",
  "image-too-large": "an image is larger than the service accepts",
  "not-utf8": "the text file is not UTF-8",
  "incomplete-upload": "the upload was cut short",
  "unsupported-format": "the file is not a format the service reads",
  "quota-storage": "it does not fit in your storage quota",
  "quota-active-jobs": "you have as many active jobs as your quota allows",
  "quota-device-seconds": "the budget does not fit in your device time of the last 30 days",
  "report-absent": "the model has no explainability report",
};

/** A `reason` slug in words ("zip-bomb" → a sentence; an unknown slug with its dashes as spaces). */
export function reasonInWords(reason: string): string {
  return REASONS[reason] ?? reason.replace(/[-_]+/g, " ");
}
