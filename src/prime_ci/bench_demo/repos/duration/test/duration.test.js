'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { formatDuration, parseDuration } = require('../duration');

test('parses a single component', () => {
  assert.equal(parseDuration('90s'), 90);
  assert.equal(parseDuration('15m'), 900);
});

test('parses combined components', () => {
  assert.equal(parseDuration('1h30m'), 5400);
  assert.equal(parseDuration('2h0m5s'), 7205);
});

test('parses days', () => {
  assert.equal(parseDuration('2d'), 172800);
  assert.equal(parseDuration('1d12h'), 129600);
});

test('rejects malformed durations', () => {
  for (const bad of ['', '10', 'h1', '5 minutes', '1h 30m']) {
    assert.throws(() => parseDuration(bad), SyntaxError, bad);
  }
});

test('formats seconds', () => {
  assert.equal(formatDuration(0), '0s');
  assert.equal(formatDuration(5400), '1h30m');
  assert.equal(formatDuration(90061), '1d1h1m1s');
});

test('format and parse round-trip', () => {
  for (const seconds of [1, 59, 3600, 86399, 86400, 200000]) {
    assert.equal(parseDuration(formatDuration(seconds)), seconds);
  }
});
