/** OData string literal: quotes doubled, so a name containing `'` cannot break out of a $filter. */
export function odataString(value: string): string {
  return `'${value.replace(/'/g, "''")}'`;
}
