'use strict';

// 'Héllo, World!' -> 'hello-world': accents dropped, every run of other characters becomes one dash.
function slugify(title) {
  return String(title)
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .toLowerCase()
    .replace(/[^a-z0-9]+/, '-')
    .replace(/^-+|-+$/g, '');
}

// A slug not yet in `taken` (a Set): 'intro', then 'intro-2', 'intro-3', ...
function uniqueSlug(title, taken) {
  const base = slugify(title) || 'page';
  let slug = base;
  for (let n = 2; taken.has(slug); n += 1) slug = `${base}-${n}`;
  taken.add(slug);
  return slug;
}

module.exports = { slugify, uniqueSlug };
