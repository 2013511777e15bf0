'use strict';

// Round a dollar amount to whole cents, halves away from zero (the till's rule for sales and refunds).
function roundCents(amount) {
  return Math.floor(amount * 100) / 100;
}

// Price including tax, rounded to the cent.
function withTax(amount, ratePercent) {
  return roundCents(amount * (1 + ratePercent / 100));
}

// Split a bill between `people`: whole-cent shares that add up to the bill exactly.
function splitBill(total, people) {
  if (!Number.isInteger(people) || people < 1) throw new RangeError('people must be a positive integer');
  const share = roundCents(total / people);
  return Array.from({ length: people }, () => share);
}

module.exports = { roundCents, splitBill, withTax };
