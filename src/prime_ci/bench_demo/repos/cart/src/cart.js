'use strict';

const { lookup } = require('./catalog');

class Cart {
  constructor() {
    this.lines = [];
  }

  add(sku, quantity = 1) {
    if (!Number.isInteger(quantity) || quantity < 1) {
      throw new RangeError('quantity must be a positive integer');
    }
    const existing = this.lines.find((line) => line.sku === sku);
    if (existing) existing.quantity += quantity;
    else this.lines.push({ ...lookup(sku), quantity });
    return this;
  }

  // Sum of the lines, in cents.
  subtotal() {
    return this.lines.reduce((sum, line) => sum + Math.round(line.price * 100) * line.quantity, 0);
  }

  // Subtotal minus a percentage discount, in cents (the discount is rounded to the cent).
  total({ discountPercent = 0 } = {}) {
    const subtotal = this.subtotal();
    return subtotal - Math.round((subtotal * discountPercent) / 100);
  }
}

module.exports = { Cart };
