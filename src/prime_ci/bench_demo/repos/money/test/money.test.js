'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { roundCents, splitBill, withTax } = require('../money');

const sum = (values) => Math.round(values.reduce((a, b) => a + b, 0) * 100) / 100;

test('amounts already in whole cents are unchanged', () => {
  for (const amount of [0, 2.5, 19.99, 0.07, 1234.56]) assert.equal(roundCents(amount), amount);
});

test('rounds to the nearest cent', () => {
  assert.equal(roundCents(1.234), 1.23);
  assert.equal(roundCents(1.236), 1.24);
});

test('halves round away from zero', () => {
  assert.equal(roundCents(0.125), 0.13);
  assert.equal(roundCents(1.005), 1.01);
  assert.equal(roundCents(1.255), 1.26);
});

test('refunds round like sales', () => {
  assert.equal(roundCents(-0.125), -0.13);
  assert.equal(roundCents(-1.005), -1.01);
  assert.equal(roundCents(-1.234), -1.23);
});

test('withTax rounds the taxed price', () => {
  assert.equal(withTax(10, 8.25), 10.83);
});

test('split shares add up to the bill', () => {
  assert.deepEqual(splitBill(10, 3), [3.34, 3.33, 3.33]);
  assert.equal(sum(splitBill(100, 7)), 100);
  assert.deepEqual(splitBill(9.99, 1), [9.99]);
});
