/**
 * Sets `key` in a Map used as a first-in-first-out cache of at most `limit` entries. When full, the oldest
 * sixteenth goes in one pass: evicting one entry per insert with `keys().next()` walks, every time, the
 * holes earlier deletions left at the front (V8 compacts a Map only when it rehashes), which made a full
 * cache cost more per insert than the work it saved.
 */
export function setBounded<K, V>(map: Map<K, V>, limit: number, key: K, value: V): void {
  if (map.size >= limit && !map.has(key)) {
    let drop = Math.max(1, limit >> 4);
    for (const old of map.keys()) {
      map.delete(old);
      if (--drop === 0) break;
    }
  }
  map.set(key, value);
}
