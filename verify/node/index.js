'use strict';
// Verify the signature of an svcgw callback.
//
// svcgw signs every callback POST with X-Svc-Signature: lowercase hex HMAC-SHA256, keyed with the
// UTF-8 signing secret, over the X-Svc-Timestamp value, one ".", and the raw body bytes exactly as
// received. Verify those bytes before parsing them (express: express.raw({type: 'application/json'})).

const crypto = require('node:crypto');

const REASONS = Object.freeze({
  NO_SIGNATURE: 'missing_signature',
  NO_TIMESTAMP: 'missing_timestamp',
  BAD_TIMESTAMP: 'malformed_timestamp',
  TOO_OLD: 'timestamp_outside_tolerance',
  NO_SECRET: 'no_secret',
  NO_MATCH: 'signature_mismatch',
});

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

function sign(secret, timestamp, body) {
  const hmac = crypto.createHmac('sha256', Buffer.from(secret, 'utf8'));
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
  const given = options.signature !== undefined ? options.signature : header(headers, 'X-Svc-Signature');
  let stamp = options.timestamp !== undefined ? String(options.timestamp) : header(headers, 'X-Svc-Timestamp');
  if (!given) return REASONS.NO_SIGNATURE;
  if (stamp === undefined || String(stamp).trim() === '') return REASONS.NO_TIMESTAMP;
  stamp = String(stamp).trim();
  if (!/^[0-9]+$/.test(stamp)) return REASONS.BAD_TIMESTAMP;
  if (tolerance !== null && tolerance !== undefined) {
    const current = now === undefined ? Date.now() / 1000 : now;
    if (Math.abs(current - Number(stamp)) > tolerance) return REASONS.TOO_OLD;
  }
  const keys = (typeof secrets === 'string' ? [secrets] : Array.from(secrets || [])).filter(Boolean);
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

module.exports = { REASONS, SignatureError, check, sign, verify };
