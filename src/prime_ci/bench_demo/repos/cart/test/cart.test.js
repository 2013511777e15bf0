'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { Cart } = require('../src/cart');

test('subtotal sums the lines in cents', () => {
  const cart = new Cart().add('tea-earl', 2).add('mug');
  assert.equal(cart.subtotal(), 2500);
});

test('adding the same sku again increases its quantity', () => {
  const cart = new Cart().add('tea-sencha').add('tea-sencha', 2);
  assert.equal(cart.lines.length, 1);
  assert.equal(cart.subtotal(), 2460);
});

test('total applies a percentage discount rounded to the cent', () => {
  const cart = new Cart().add('tea-sencha', 3);
  assert.equal(cart.total({ discountPercent: 15 }), 2091);
});

test('unknown skus and bad quantities are refused', () => {
  assert.throws(() => new Cart().add('coffee'), /unknown sku/);
  assert.throws(() => new Cart().add('mug', 0), RangeError);
});
