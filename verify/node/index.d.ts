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
/** A timestamp of more digits than this is malformed_timestamp. */
export declare const MAX_TIMESTAMP_DIGITS: 12;
/** A string (its UTF-8 bytes are the key) or the key's bytes. An empty or blank one is never a key. */
export type Secret = string | Buffer | Uint8Array;
export type HeadersLike = Record<string, string | string[] | undefined> | { get(name: string): string | null };
export interface VerifyOptions {
  /** One secret or several (a rotation); empty ones, null and undefined are skipped: none left is no_secret. */
  secrets: Secret | Iterable<Secret | null | undefined> | null | undefined;
  /**
   * Seconds the timestamp may be away from now: a finite number, 0 or more (else a TypeError or
   * RangeError is thrown); default 300, null: not checked.
   */
  tolerance?: number | null;
  signature?: string;
  timestamp?: string | number;
  now?: number;
}
export declare class SignatureError extends Error {
  readonly reason: Reason;
}
export declare function sign(secret: Secret, timestamp: string | number, body: Buffer | string): string;
export declare function check(body: Buffer | string, headers: HeadersLike | undefined, options: VerifyOptions): Reason | null;
export declare function verify(body: Buffer | string, headers: HeadersLike | undefined, options: VerifyOptions): void;
