'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const { REASONS, SignatureError, check, sign, verify } = require('..');

const body = Buffer.from('{"appid":"we_1","event_type":"Msg","events":[{"id":7000000000000000001}]}');
const now = 1_800_000_000;

function signed(secret, timestamp = now, raw = body) {
  // Computed here from the definition, not by the library under test.
  const mac = crypto.createHmac('sha256', secret).update(`${timestamp}.`).update(raw).digest('hex');
  return { 'x-svc-signature': mac, 'x-svc-timestamp': String(timestamp) };
}

test('a valid signature passes, whatever the header names case', () => {
  const headers = signed('whsec_a');
  assert.equal(check(body, headers, { secrets: 'whsec_a', now }), null);
  const upper = { 'X-Svc-Signature': headers['x-svc-signature'].toUpperCase(), 'X-SVC-TIMESTAMP': String(now) };
  assert.doesNotThrow(() => verify(body, upper, { secrets: ['whsec_a'], now }));
  assert.equal(sign('whsec_a', now, body), headers['x-svc-signature']);
});

test('any secret of the list verifies, for rotation', () => {
  assert.equal(check(body, signed('old'), { secrets: ['new', 'old'], now }), null);
  assert.equal(check(body, signed('other'), { secrets: ['new', 'old'], now }), REASONS.NO_MATCH);
});

test('a changed body or timestamp fails', () => {
  const headers = signed('s');
  assert.equal(check(Buffer.concat([body, Buffer.from(' ')]), headers, { secrets: 's', now }), REASONS.NO_MATCH);
  const moved = { ...headers, 'x-svc-timestamp': String(now + 1) };
  assert.equal(check(body, moved, { secrets: 's', now }), REASONS.NO_MATCH);
});

test('the tolerance is the caller\'s choice', () => {
  const old = signed('s', now - 600);
  assert.equal(check(body, old, { secrets: 's', now }), REASONS.TOO_OLD);
  assert.equal(check(body, old, { secrets: 's', now, tolerance: 900 }), null);
  assert.equal(check(body, old, { secrets: 's', now, tolerance: null }), null);
  assert.equal(check(body, signed('s', now + 600), { secrets: 's', now }), REASONS.TOO_OLD);
});

test('missing or malformed parts give their own reason', () => {
  const headers = signed('s');
  assert.equal(check(body, { 'x-svc-timestamp': String(now) }, { secrets: 's', now }), REASONS.NO_SIGNATURE);
  assert.equal(check(body, { 'x-svc-signature': 'ab' }, { secrets: 's', now }), REASONS.NO_TIMESTAMP);
  assert.equal(check(body, { ...headers, 'x-svc-timestamp': '1e9' }, { secrets: 's', now }), REASONS.BAD_TIMESTAMP);
  assert.equal(check(body, headers, { secrets: [], now }), REASONS.NO_SECRET);
  assert.equal(check(body, { ...headers, 'x-svc-signature': 'zz' }, { secrets: 's', now }), REASONS.NO_MATCH);
});

test('verify throws a SignatureError with the reason', () => {
  assert.throws(
    () => verify(body, signed('x'), { secrets: 's', now }),
    (err) => err instanceof SignatureError && err.reason === REASONS.NO_MATCH && /none of the secrets/.test(err.message),
  );
});

test('a fetch Headers object and explicit values are read too', () => {
  const h = signed('s');
  const headers = new Headers({ 'X-Svc-Signature': h['x-svc-signature'], 'X-Svc-Timestamp': h['x-svc-timestamp'] });
  assert.equal(check(body, headers, { secrets: 's', now }), null);
  const explicit = { secrets: 's', now, signature: h['x-svc-signature'], timestamp: now };
  assert.equal(check(body, undefined, explicit), null);
});
