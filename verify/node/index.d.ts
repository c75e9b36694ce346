/// <reference types="node" />
export declare const REASONS: Readonly<{
  NO_SIGNATURE: 'missing_signature';
  NO_TIMESTAMP: 'missing_timestamp';
  BAD_TIMESTAMP: 'malformed_timestamp';
  TOO_OLD: 'timestamp_outside_tolerance';
  NO_SECRET: 'no_secret';
  NO_MATCH: 'signature_mismatch';
}>;
export type Reason = (typeof REASONS)[keyof typeof REASONS];
export type HeadersLike = Record<string, string | string[] | undefined> | { get(name: string): string | null };
export interface VerifyOptions {
  secrets: string | Iterable<string>;
  /** Seconds the timestamp may be away from now; default 300, null: not checked. */
  tolerance?: number | null;
  signature?: string;
  timestamp?: string | number;
  now?: number;
}
export declare class SignatureError extends Error {
  readonly reason: Reason;
}
export declare function sign(secret: string, timestamp: string | number, body: Buffer | string): string;
export declare function check(body: Buffer | string, headers: HeadersLike | undefined, options: VerifyOptions): Reason | null;
export declare function verify(body: Buffer | string, headers: HeadersLike | undefined, options: VerifyOptions): void;
