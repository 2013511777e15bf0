'use strict';

// Prices are integer cents.
const PRODUCTS = {
  'tea-earl': { name: 'Earl Grey, 100 g', unitPrice: 650 },
  'tea-sencha': { name: 'Sencha, 100 g', unitPrice: 820 },
  mug: { name: 'Stoneware mug', unitPrice: 1200 },
};

function lookup(sku) {
  const product = PRODUCTS[sku];
  if (!product) throw new Error(`unknown sku: ${sku}`);
  return { sku, ...product };
}

module.exports = { PRODUCTS, lookup };
