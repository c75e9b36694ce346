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

test('an empty secret is never a key', () => {
  // What a customer gets from process.env.SECRET || '' with the variable unset: a forger signs with
  // the empty key, and that must not pass.
  const forged = signed('');
  for (const nothing of ['', Buffer.alloc(0), new Uint8Array(0), null, undefined, [], ['', Buffer.alloc(0), null], ' \n', Buffer.from('\t\r\n')]) {
    assert.equal(check(body, forged, { secrets: nothing, now }), REASONS.NO_SECRET, String(nothing));
  }
  assert.throws(() => verify(body, forged, { secrets: Buffer.alloc(0), now }), (err) => err.reason === REASONS.NO_SECRET);
  // Beside a real secret, an empty one is skipped, not tried.
  assert.equal(check(body, forged, { secrets: ['', 'whsec_a'], now }), REASONS.NO_MATCH);
  assert.equal(check(body, signed('whsec_a'), { secrets: [Buffer.alloc(0), 'whsec_a'], now }), null);
});

test('a Buffer or Uint8Array secret is the key itself; another type is refused clearly', () => {
  const headers = signed('whsec_a');
  assert.equal(check(body, headers, { secrets: Buffer.from('whsec_a'), now }), null);
  assert.equal(check(body, headers, { secrets: new TextEncoder().encode('whsec_a'), now }), null);
  assert.equal(check(body, headers, { secrets: [Buffer.from('old'), 'whsec_a'], now }), null);
  assert.equal(sign(Buffer.from('whsec_a'), now, body), headers['x-svc-signature']);
  for (const wrong of [123, [123], ['s', {}], true]) {
    assert.throws(() => check(body, headers, { secrets: wrong, now }), (err) => err instanceof TypeError && /secret/.test(err.message));
  }
});

test('a timestamp longer than any real one is malformed', () => {
  for (const stamp of ['1'.repeat(13), '0'.repeat(13), '9'.repeat(400), '9'.repeat(5000)]) {
    const headers = { ...signed('s'), 'x-svc-timestamp': stamp };
    for (const tolerance of [300, null]) {
      assert.equal(check(body, headers, { secrets: 's', now, tolerance }), REASONS.BAD_TIMESTAMP, stamp.length);
    }
  }
  assert.equal(check(body, signed('s'), { secrets: 's', now, timestamp: 1e21 }), REASONS.BAD_TIMESTAMP);
  const far = 999_999_999_999;
  assert.equal(check(body, signed('s', far), { secrets: 's', now, tolerance: null }), null);
  assert.equal(check(body, signed('s', far), { secrets: 's', now }), REASONS.TOO_OLD);
});

test('a tolerance that is not a finite number is refused', () => {
  const old = signed('s', now - 1_000_000);
  for (const wrong of [NaN, Infinity, -Infinity, -1]) {
    assert.throws(() => check(body, old, { secrets: 's', now, tolerance: wrong }), (err) => err instanceof RangeError && /tolerance/.test(err.message));
  }
  for (const wrong of ['300', true, [300], {}]) {
    assert.throws(() => verify(body, old, { secrets: 's', now, tolerance: wrong }), (err) => err instanceof TypeError && /tolerance/.test(err.message));
  }
  assert.throws(() => check(body, old, { secrets: 's', now: NaN }), (err) => err instanceof RangeError && /now/.test(err.message));
  assert.equal(check(body, signed('s'), { secrets: 's', now, tolerance: 0 }), null);
  assert.equal(check(body, signed('s'), { secrets: 's', now, tolerance: undefined }), null);
});
