'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { slugify, uniqueSlug } = require('../slug');

test('single words', () => {
  assert.equal(slugify('Introduction'), 'introduction');
});

test('every separator becomes a dash', () => {
  assert.equal(slugify('Getting Started with the CLI'), 'getting-started-with-the-cli');
  assert.equal(slugify('Q&A: gates, budgets and retries'), 'q-a-gates-budgets-and-retries');
});

test('accents are dropped and edges trimmed', () => {
  assert.equal(slugify('  Café Crème!  '), 'cafe-creme');
});

test('unique slugs get a counter', () => {
  const taken = new Set();
  assert.deepEqual(
    ['Setup', 'Setup', 'Set up!', 'Setup'].map((t) => uniqueSlug(t, taken)),
    ['setup', 'setup-2', 'set-up', 'setup-3'],
  );
  assert.equal(uniqueSlug('!!!', taken), 'page');
});
