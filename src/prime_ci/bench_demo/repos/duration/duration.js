'use strict';

// Seconds per unit, largest last.
const UNITS = { s: 1, m: 60, h: 3600, d: 86400 };

// '1h30m' -> 5400 (seconds). Components may appear in any order; each is a number and a unit.
function parseDuration(text) {
  const source = String(text).trim();
  const pattern = /(\d+)([hms])/g;
  let total = 0;
  let consumed = '';
  for (const [part, value, unit] of source.matchAll(pattern)) {
    total = Number(value) * UNITS[unit];
    consumed += part;
  }
  if (!consumed || consumed !== source) throw new SyntaxError(`invalid duration: ${JSON.stringify(text)}`);
  return total;
}

// 5400 -> '1h30m'; zero is '0s'.
function formatDuration(seconds) {
  if (!Number.isInteger(seconds) || seconds < 0) throw new RangeError('seconds must be a non-negative integer');
  const parts = [];
  let rest = seconds;
  for (const [unit, size] of Object.entries(UNITS).reverse()) {
    if (rest >= size) {
      parts.push(`${Math.floor(rest / size)}${unit}`);
      rest %= size;
    }
  }
  return parts.join('') || '0s';
}

module.exports = { UNITS, formatDuration, parseDuration };
