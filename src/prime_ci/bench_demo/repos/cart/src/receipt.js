'use strict';

function formatCents(cents) {
  return `$${(cents / 100).toFixed(2)}`;
}

function receipt(cart, options = {}) {
  const lines = cart.lines.map(
    (line) => `${line.quantity} x ${line.name} @ $${line.price.toFixed(2)}`,
  );
  if (options.discountPercent) lines.push(`Discount: ${options.discountPercent}%`);
  lines.push(`Total: ${formatCents(cart.total(options))}`);
  return lines.join('\n');
}

module.exports = { formatCents, receipt };
