'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { Cart } = require('../src/cart');
const { formatCents, receipt } = require('../src/receipt');

test('formatCents prints dollars and cents', () => {
  assert.equal(formatCents(2091), '$20.91');
  assert.equal(formatCents(5), '$0.05');
});

test('receipt lists each line with its unit price and the total', () => {
  const cart = new Cart().add('tea-earl', 2).add('mug');
  assert.equal(
    receipt(cart, { discountPercent: 10 }),
    ['2 x Earl Grey, 100 g @ $6.50', '1 x Stoneware mug @ $12.00', 'Discount: 10%', 'Total: $22.50'].join('\n'),
  );
});
