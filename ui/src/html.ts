// htm over Preact: templates are parsed by htm at run time without eval, and Preact sets every interpolated value
// as a text node or a property, so API strings are never parsed as HTML (docs/console.md).
import { h } from 'preact';
import htm from 'htm';

export const html = htm.bind(h);
