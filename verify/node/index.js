'use strict';
// Verify the signature of an svcgw callback.
//
// svcgw signs every callback POST with X-Svc-Signature: lowercase hex HMAC-SHA256, keyed with the
// UTF-8 signing secret, over the X-Svc-Timestamp value, one ".", and the raw body bytes exactly as
// received. Verify those bytes before parsing them (express: express.raw({type: 'application/json'})).
//
// A secret is a string (its UTF-8 bytes are the key) or a Buffer / Uint8Array (the key itself). An
// empty secret, or one of only spaces and line breaks, is never a key: `secrets: process.env.SECRET`
// with the variable unset fails every check with no_secret. What a request can get wrong is a
// reason (check) or a SignatureError (verify), never another error: a timestamp of more than
// MAX_TIMESTAMP_DIGITS digits is malformed_timestamp. What the caller gets wrong throws on every
// call: a TypeError for a secret of another type or a tolerance that is not a number, a RangeError
// for a tolerance (or `now`) that is not finite, or a negative tolerance.

const crypto = require('node:crypto');

const REASONS = Object.freeze({
  NO_SIGNATURE: 'missing_signature',
  NO_TIMESTAMP: 'missing_timestamp',
  BAD_TIMESTAMP: 'malformed_timestamp',
  TOO_OLD: 'timestamp_outside_tolerance',
  NO_SECRET: 'no_secret',
  NO_MATCH: 'signature_mismatch',
});

// Unix seconds have 10 digits until 2286 and 12 until the year 33658: a longer value is no timestamp.
const MAX_TIMESTAMP_DIGITS = 12;
// A secret of only these is no secret: a file or variable that holds nothing but a line break.
const BLANK = /^[ \t\n\r\v\f]*$/;

const MESSAGES = {
  missing_signature: 'the X-Svc-Signature header is missing',
  missing_timestamp: 'the X-Svc-Timestamp header is missing',
  malformed_timestamp: 'X-Svc-Timestamp is not a whole number of Unix seconds',
  timestamp_outside_tolerance: 'X-Svc-Timestamp is further from now than the tolerance allows',
  no_secret: 'no signing secret was given',
  signature_mismatch: 'the signature matches none of the secrets',
};

class SignatureError extends Error {
  constructor(reason) {
    super(MESSAGES[reason] || reason);
    this.name = 'SignatureError';
    this.reason = reason;
  }
}

function key(secret) {
  if (typeof secret === 'string') return Buffer.from(secret, 'utf8');
  if (secret instanceof Uint8Array) return Buffer.from(secret.buffer, secret.byteOffset, secret.byteLength);
  throw new TypeError(`a signing secret is a string, a Buffer or a Uint8Array, not ${describe(secret)}`);
}

function describe(value) {
  return value === null ? 'null' : Array.isArray(value) ? 'an array' : typeof value;
}

// The keys to try: every secret given, but the empty (or blank) ones, which are never keys.
function keysOf(secrets) {
  if (secrets === undefined || secrets === null) return [];
  let given;
  if (typeof secrets === 'string' || secrets instanceof Uint8Array) given = [secrets];
  else if (typeof secrets === 'object' && typeof secrets[Symbol.iterator] === 'function') given = Array.from(secrets);
  else throw new TypeError(`secrets is a signing secret or a list of them, not ${describe(secrets)}`);
  return given
    .filter((secret) => secret !== undefined && secret !== null)
    .map(key)
    .filter((bytes) => !BLANK.test(bytes.toString('latin1')));
}

// A finite number of seconds; TypeError or RangeError naming the option otherwise.
function seconds(name, value) {
  if (typeof value !== 'number') throw new TypeError(`${name} is a number of seconds, not ${describe(value)}`);
  if (!Number.isFinite(value)) throw new RangeError(`${name} must be a finite number of seconds, not ${value}`);
  return value;
}

function sign(secret, timestamp, body) {
  const hmac = crypto.createHmac('sha256', key(secret));
  hmac.update(Buffer.from(`${timestamp}.`, 'ascii'));
  hmac.update(typeof body === 'string' ? Buffer.from(body, 'utf8') : body);
  return hmac.digest('hex');
}

function header(headers, name) {
  if (!headers) return undefined;
  if (typeof headers.get === 'function') {
    const value = headers.get(name); // a fetch Headers object
    return value === null ? undefined : value;
  }
  const wanted = name.toLowerCase();
  for (const key of Object.keys(headers)) {
    if (key.toLowerCase() === wanted) {
      const value = headers[key];
      return Array.isArray(value) ? value[0] : value;
    }
  }
  return undefined;
}

// null when body is signed by one of the secrets, else the reason (one of REASONS).
function check(body, headers, options = {}) {
  const { secrets, tolerance = 300, now } = options;
  // The caller's own options first: a mistake there is refused on every call, whatever arrives.
  const keys = keysOf(secrets);
  if (tolerance !== null && seconds('tolerance', tolerance) < 0) {
    throw new RangeError(`tolerance must be 0 or more seconds (null: not checked), not ${tolerance}`);
  }
  const current = now === undefined ? Date.now() / 1000 : seconds('now', now);
  const given = options.signature !== undefined ? options.signature : header(headers, 'X-Svc-Signature');
  let stamp = options.timestamp !== undefined ? String(options.timestamp) : header(headers, 'X-Svc-Timestamp');
  if (!given) return REASONS.NO_SIGNATURE;
  if (stamp === undefined || stamp === null || String(stamp).trim() === '') return REASONS.NO_TIMESTAMP;
  stamp = String(stamp).trim();
  if (stamp.length > MAX_TIMESTAMP_DIGITS || !/^[0-9]+$/.test(stamp)) return REASONS.BAD_TIMESTAMP;
  if (tolerance !== null && Math.abs(current - Number(stamp)) > tolerance) return REASONS.TOO_OLD;
  if (keys.length === 0) return REASONS.NO_SECRET;
  const presented = Buffer.from(String(given).trim().toLowerCase(), 'utf8');
  let matched = false;
  for (const secret of keys) {
    const expected = Buffer.from(sign(secret, stamp, body), 'ascii');
    // Every secret is compared in constant time, so the time taken does not tell which one matched.
    const same = expected.length === presented.length && crypto.timingSafeEqual(expected, presented);
    matched = matched || same;
  }
  return matched ? null : REASONS.NO_MATCH;
}

// Returns when body is signed by one of the secrets; throws SignatureError otherwise.
function verify(body, headers, options = {}) {
  const reason = check(body, headers, options);
  if (reason !== null) throw new SignatureError(reason);
}

module.exports = { MAX_TIMESTAMP_DIGITS, REASONS, SignatureError, check, sign, verify };
